"""gpuops' benchmark relay: runs a benchmark client on the host, or polls a server's metrics there.

    python -c SOURCE run ENV_FILE RUN_DIR ARGV...
    python -c SOURCE metrics ENV_FILE URL INTERVAL

``run``: ARGV with stderr merged into stdout and tqdm's \\r updates split into lines (a finished bar
is let out at once, not when the next one starts), in RUN_DIR (created 0700), with PYTHONUNBUFFERED
and OPENAI_API_KEY from the env file's GPUOPS_API_KEY; exits with ARGV's status.
``metrics``: URL's text as one JSON line every INTERVAL seconds (``{"status": N, "text": …}`` or
``{"status": N|null, "error": …}``), with the same key as a bearer token.

Standard library only, Python 3.6 and newer.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request


def api_key(env_file):
    try:
        with open(env_file) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.startswith("GPUOPS_API_KEY="):
            words = shlex.split(line.split("=", 1)[1])
            return words[0] if words else None
    return None


def run(env_file, run_dir, argv):
    os.makedirs(run_dir, mode=0o700, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    key = api_key(env_file) if env_file else None
    if key:
        env["OPENAI_API_KEY"] = key
    proc = subprocess.Popen(argv, cwd=run_dir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    out, pending = sys.stdout.buffer, b""
    while True:
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        *lines, pending = re.split(rb"[\r\n]", pending + chunk)
        if pending.endswith(b"]") and b"|" in pending:
            lines.append(pending)
            pending = b""
        out.write(b"".join(line + b"\n" for line in lines if line.strip()))
        out.flush()
    if pending.strip():
        out.write(pending + b"\n")
    out.flush()
    return proc.wait()


def metrics(env_file, url, interval):
    key = api_key(env_file) if env_file else None
    headers = {"Authorization": "Bearer " + key} if key else {}
    while True:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
                doc = {"status": r.status, "text": r.read().decode("utf-8", "replace")}
        except urllib.error.HTTPError as e:
            doc = {"status": e.code, "error": "HTTP %d from %s" % (e.code, url)}
        except Exception as e:
            doc = {"status": None, "error": "%s: %s" % (url, e)}
        print(json.dumps(doc), flush=True)
        time.sleep(interval)


def main(argv):
    if argv[0] == "run":
        sys.exit(run(argv[1], argv[2], argv[3:]))
    metrics(argv[1], argv[2], float(argv[3]))


if __name__ == "__main__":
    main(sys.argv[1:])
