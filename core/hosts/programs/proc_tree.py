"""A process and its live descendants on the host.

    python -c SOURCE PID

Prints one "pid<TAB>cmdline" per line (the command line cut to 300 characters), in pid order;
nothing when PID is gone. Zombies are not alive. Standard library only, Python 3.6 and newer.
"""

import os
import sys


def main(root):
    parent, cmd = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d, "rb") as f:
                stat = f.read().decode("utf-8", "replace")
            with open("/proc/%s/cmdline" % d, "rb") as f:
                line = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields and fields[0] == "Z":
            continue  # a zombie is not alive
        parent[int(d)] = int(fields[1]) if len(fields) > 1 else 0
        cmd[int(d)] = line
    tree, todo = [], [root] if root in parent else []
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(p for p, pp in parent.items() if pp == pid)
    for pid in sorted(tree):
        print("%d\t%s" % (pid, cmd[pid][:300]))


if __name__ == "__main__":
    main(int(sys.argv[1]))
