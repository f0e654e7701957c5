"""gpuops' tether: runs a command that must not outlive the gpuops process that started it.

A model's download (``hf download``) runs for minutes or hours. Left alone after a ``kill -9`` of
gpuops it went on writing into the model folder with nobody watching it: the next deploy then
resumed beside a second writer, and a restart found a folder that was still changing.

    python -c SOURCE --gpuops-tether ARGV...

The tether leads a process group of its own (a local command starts in a session of its own; over
SSH gpuops' guard starts it with setsid), runs ARGV in that group and looks at its own parent four
times a second. When the parent is gone (the tether was reparented: gpuops was killed, or the
guard's shell on the host was) it ends the whole group: SIGTERM, then SIGKILL after a grace period.
A SIGTERM, SIGHUP or SIGINT sent to the tether alone is passed on to the group the same way. Its
exit status is ARGV's.

Standard library only, Python 3.6 and newer.
"""

import os
import signal
import subprocess
import sys
import time

MARKER = "--gpuops-tether"
POLL_S = 0.25
GRACE_S = 1.5

_asked = []  # the signals the tether was sent


def _note(signum, _frame):
    _asked.append(signum)


def end_group(child):
    """SIGTERM to the group (the tether ignores it), SIGKILL to whatever is left after the grace."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        os.killpg(0, signal.SIGTERM)
    except OSError:
        child.terminate()
    deadline = time.monotonic() + GRACE_S
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if child.poll() is None:
        try:
            os.killpg(0, signal.SIGKILL)  # the tether too: nothing of the group is left
        except OSError:
            child.kill()


def main(argv):
    args = list(argv)
    if args and args[0] == MARKER:
        args.pop(0)
    if not args:
        sys.stderr.write("gpuops tether: no command given\n")
        return 2
    if os.getpgrp() != os.getpid():
        try:
            os.setpgid(0, 0)  # a group of its own: ending it ends nothing of the caller's
        except OSError:
            pass
    parent = os.getppid()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _note)
    try:
        child = subprocess.Popen(args)
    except OSError as exc:
        sys.stderr.write("gpuops tether: %s: %s\n" % (args[0], exc.strerror or exc))
        return 127
    while True:
        rc = child.poll()
        if rc is not None:
            return rc if rc >= 0 else 128 - rc
        if _asked or os.getppid() != parent:
            end_group(child)
            rc = child.wait()
            return rc if rc >= 0 else 128 - rc
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
