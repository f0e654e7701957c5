"""gpuops' server launcher: starts ``python -m MODULE ARGS`` with the API key (and every other
secret flag's value: ``${GPUOPS_ADMIN_API_KEY}``, ``${GPUOPS_SSL_KEYFILE_PASSWORD}``, each filled in
from the env file's variable of that name, each masked) kept out of every process listing and
every log line.

The engine takes ``--api-key`` from its command line only, and a command line is world-readable
(``/proc/PID/cmdline``, ``ps -ww``). So the command line holds the placeholder
``${GPUOPS_API_KEY}``; this launcher (run as ``python launch.py -m MODULE ARGS``, the engine's
server module) forks, and the child puts the key from its environment (the deployment's 0600 env
file) into ``sys.argv`` in place of the placeholder and runs the module in-process (runpy), so no
exec'd argv ever holds the key: the engine's rank processes are spawned (their command lines are
multiprocessing's). The engine logs its ``server_args`` (with ``api_key``) at start: the parent relays
the child's stdout and stderr to its own stdout with every occurrence of the key replaced by
``***``, and exits as the child did. The parent ignores SIGTERM/SIGINT/SIGHUP (a stop signals the
whole process group, the server handles it) and lives until the child has ended and its output
is drained, so a pid or a unit's MainPID that is this process follows the server's life.

Standard library only, Python 3.6 and newer; written beside the env file at deploy.
"""

import os
import re
import runpy
import select
import signal
import sys
import time

PLACEHOLDER = "${GPUOPS_API_KEY}"
_PLACEHOLDER = re.compile(r"\$\{(GPUOPS_[A-Z0-9_]+)\}$")
MASK = b"***"
DRAIN_S = 2.0  # after the child ends: how long its children may still be writing


def usage(message):
    sys.stderr.write("gpuops launcher: %s\n" % message)
    return 2


def held_back(buf, key):
    """How many bytes at the end of `buf` could be the start of `key` (kept until more arrive)."""
    for n in range(min(len(key) - 1, len(buf)), 0, -1):
        if key.startswith(buf[-n:]):
            return n
    return 0


def write_all(fd, data):
    while data:
        try:
            n = os.write(fd, data)
        except InterruptedError:
            continue
        except OSError:
            return  # stdout gone (a closed journal stream): keep draining, or the server blocks
        data = data[n:]


def relay(read_fd, keys, child):
    """Copy `read_fd` to stdout with every one of `keys` masked until EOF (or DRAIN_S after the
    child ended)."""
    pending = b""
    status = None
    deadline = None
    while True:
        timeout = 1.0 if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            ready = select.select([read_fd], [], [], timeout)[0]
        except InterruptedError:
            continue
        if ready:
            try:
                chunk = os.read(read_fd, 65536)
            except InterruptedError:
                continue
            if not chunk:
                break
            buf = pending + chunk
            for key in keys:
                buf = buf.replace(key, MASK)
            keep = max(held_back(buf, key) for key in keys)
            pending = buf[len(buf) - keep:] if keep else b""
            write_all(1, buf[:len(buf) - keep] if keep else buf)
        if status is None:
            pid, st = os.waitpid(child, os.WNOHANG)
            if pid:
                status = st
                deadline = time.monotonic() + DRAIN_S
        elif not ready and time.monotonic() >= deadline:
            break
    for key in keys:
        pending = pending.replace(key, MASK)
    write_all(1, pending)
    if status is None:
        status = os.waitpid(child, 0)[1]
    return status


def main(argv):
    if len(argv) < 2 or argv[0] != "-m":
        return usage("usage: launch.py -m MODULE ARGS...")
    module, args = argv[1], argv[2:]
    # the secrets the command line stands in for, each from the env file's variable of its name
    # (taken out of the environment: the server's own children never see them)
    wanted = [m.group(1) for m in (_PLACEHOLDER.match(a) for a in args) if m]
    values = {}
    for name in set(wanted) | {"GPUOPS_API_KEY"}:
        value = os.environ.pop(name, "")
        if value:
            values[name] = value
        elif name in wanted:
            return usage("%s is not set (it comes from the deployment's env file)" % name)
    if not values:  # nothing to hide: run the module as `python -m` would
        sys.argv = [module] + args
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    secrets = sorted({v.encode() for v in values.values()}, key=len, reverse=True)
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_fd)
        os.dup2(write_fd, 1)
        os.dup2(write_fd, 2)
        os.close(write_fd)

        def filled(a):
            m = _PLACEHOLDER.match(a)
            return values[m.group(1)] if m and m.group(1) in values else a
        sys.argv = [module] + [filled(a) for a in args]
        values.clear()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    os.close(write_fd)
    status = relay(read_fd, secrets, child)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
