"""A router's view of its replicas, asked on the router's host (no proxies).

    python -c SOURCE HOST PORT

Prints one JSON line ``{"/readiness": [status, body], "/workers": [status, body]}`` (status null and
the error's text when a path cannot be asked). A keyed router (--api-key) wants the key for
/workers: ``$GPUOPS_API_KEY``, from its env file there. Standard library only, Python 3.6 and newer.
"""

import json
import os
import sys
import urllib.error
import urllib.request


def main(host, port):
    base = "http://%s:%s" % (host, port)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    key = os.environ.get("GPUOPS_API_KEY")
    out = {}
    for path in ("/readiness", "/workers"):
        req = urllib.request.Request(base + path)
        if key:
            req.add_header("Authorization", "Bearer " + key)
        try:
            with opener.open(req, timeout=5) as r:
                out[path] = [r.status, json.loads(r.read() or b"null")]
        except urllib.error.HTTPError as e:
            try:
                body = json.loads(e.read() or b"null")
            except ValueError:
                body = None
            out[path] = [e.code, body]
        except Exception as e:
            out[path] = [None, str(e)[:300]]
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
