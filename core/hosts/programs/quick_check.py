"""A deployment's quick check: one short chat completion, asked on the server's host.

    python -c SOURCE PORT MODEL HOST

POSTs "Say hello in five words." (16 tokens at most) to http://HOST:PORT/v1/chat/completions for
MODEL, with ``$GPUOPS_API_KEY`` (from the deployment's env file there) as a bearer token when set.
Prints ``{"seconds", "content", "reasoning", "usage"}`` as one JSON line; a failure is a traceback
on stderr and a non-zero exit. Standard library only, Python 3.6 and newer.
"""

import json
import os
import sys
import time
import urllib.request


def main(port, model, host):
    body = json.dumps({"model": model, "max_tokens": 16,
                       "messages": [{"role": "user", "content": "Say hello in five words."}]}).encode()
    req = urllib.request.Request("http://%s:%s/v1/chat/completions" % (host, port), data=body,
                                 headers={"Content-Type": "application/json"})
    key = os.environ.get("GPUOPS_API_KEY")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    t0 = time.time()
    with urllib.request.urlopen(req, timeout=120) as r:
        out = json.load(r)
    msg = out["choices"][0]["message"]
    print(json.dumps({"seconds": round(time.time() - t0, 3), "content": msg.get("content"),
                      "reasoning": bool(msg.get("reasoning_content")), "usage": out.get("usage")}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
