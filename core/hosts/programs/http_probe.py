"""GET some paths of a server, asked on its host (no proxies): a router's view of its replicas
(/readiness, /workers), a server's /health.

    python -c SOURCE HOST PORT TIMEOUT PATH [PATH ...]

Prints one JSON line ``{PATH: [status, body, seconds], ...}``: the body read as JSON (null when it is
empty or not JSON); status null and the error's text as body when a path cannot be asked (refused,
timed out after TIMEOUT seconds). ``$GPUOPS_API_KEY`` (from the deployment's env file there) goes as
a bearer token when set. Standard library only, Python 3.6 and newer.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request


def _json(data):
    try:
        return json.loads(data or b"null")
    except ValueError:
        return None


def main(host, port, timeout, paths):
    base = "http://%s:%s" % (host, port)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    key = os.environ.get("GPUOPS_API_KEY")
    out = {}
    for path in paths:
        req = urllib.request.Request(base + path)
        if key:
            req.add_header("Authorization", "Bearer " + key)
        t0 = time.time()
        try:
            with opener.open(req, timeout=timeout) as r:
                out[path] = [r.status, _json(r.read()), round(time.time() - t0, 3)]
        except urllib.error.HTTPError as e:
            out[path] = [e.code, _json(e.read()), round(time.time() - t0, 3)]
        except Exception as e:
            out[path] = [None, (str(e) or type(e).__name__)[:300], round(time.time() - t0, 3)]
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:])
