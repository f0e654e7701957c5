"""The TCP ports in LISTEN on the host, with the process that holds each.

    python -c SOURCE

Prints ``{"listening": {port: holder}}`` for every TCP port in LISTEN (IPv4 and IPv6, from
/proc/net/tcp and tcp6), the holder as "pid N (user: command)" where /proc/*/fd shows its socket,
else ""; exits 3 when neither table can be read (not Linux). Standard library only, Python 3.6 and
newer.
"""

import json
import os
import sys


def holder(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            cmd = " ".join(p.decode("utf-8", "replace") for p in f.read().split(b"\0") if p)
        uid = os.stat("/proc/%s" % pid).st_uid
    except OSError:
        return ""
    try:
        import pwd
        user = pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        user = str(uid)
    return "pid %s (%s: %s)" % (pid, user, cmd[:120])


def main():
    ports, inodes, read = {}, {}, False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        read = True
        for row in rows:
            col = row.split()
            if len(col) < 10 or col[3] != "0A":  # 0A: TCP_LISTEN
                continue
            port = int(col[1].rsplit(":", 1)[1], 16)
            ports.setdefault(port, "")
            if col[9] != "0":
                inodes["socket:[%s]" % col[9]] = port
    if not read:
        sys.exit(3)
    left = set(inodes.values())
    for pid in os.listdir("/proc"):
        if not left:
            break
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                port = inodes.get(os.readlink("/proc/%s/fd/%s" % (pid, fd)))
            except OSError:
                continue
            if port in left:
                ports[port] = holder(pid)
                left.discard(port)
    sys.stdout.write(json.dumps({"listening": ports}))


if __name__ == "__main__":
    main()
