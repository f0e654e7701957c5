"""A model copy's config on the host: a model folder, or an HF cache entry (its snapshots).

    python -c SOURCE PATH

Prints ``{"config": …, "index": …|null, "sizes": {shard: bytes}, "dir": FOLDER, "tokenizer": …|null}``
for the first folder holding a config.json (PATH, then PATH/snapshots/*); exits 3 when there is none.
``tokenizer``: the ``tokenizer_class`` and ``auto_map`` of its tokenizer_config.json (not its chat
template or its tokens: they can be large). Standard library only, Python 3.6 and newer.
"""

import glob
import json
import os
import sys


def read_json(path):
    with open(path) as f:
        return json.load(f)


def main(p):
    cands = [p] + sorted(glob.glob(os.path.join(p, "snapshots", "*")))
    for d in cands:
        f = os.path.join(d, "config.json")
        if os.path.isfile(f):
            idx = os.path.join(d, "model.safetensors.index.json")
            sizes = {}
            for name in os.listdir(d):
                if name.endswith(".safetensors"):
                    try:
                        sizes[name] = os.stat(os.path.join(d, name)).st_size
                    except OSError:
                        pass
            tok = os.path.join(d, "tokenizer_config.json")
            tokenizer = None
            if os.path.isfile(tok):
                try:
                    t = read_json(tok)
                    tokenizer = {k: t.get(k) for k in ("tokenizer_class", "auto_map")} if isinstance(t, dict) else None
                except (OSError, ValueError):
                    tokenizer = None
            out = {"config": read_json(f), "index": read_json(idx) if os.path.isfile(idx) else None,
                   "sizes": sizes, "dir": d, "tokenizer": tokenizer}
            sys.stdout.write(json.dumps(out))
            sys.exit(0)
    sys.exit(3)


if __name__ == "__main__":
    main(sys.argv[1])
