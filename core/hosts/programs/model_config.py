"""A model copy's config on the host: a model folder, or an HF cache entry (its snapshots).

    python -c SOURCE PATH

Prints ``{"config": …, "index": …|null, "sizes": {shard: bytes}, "dir": FOLDER, "tokenizer": …|null,
"chat_template": TEXT|null}`` for the first folder holding a config.json (PATH, then PATH/snapshots/*);
exits 3 when there is none. ``tokenizer``: of its tokenizer_config.json, the ``tokenizer_class``,
``auto_map``, ``chat_template`` and ``additional_special_tokens``, and the text of each token of its
``added_tokens_decoder`` (not the tokens' other fields); ``chat_template``: its chat_template.jinja
(up to 1 MB). Standard library only, Python 3.6 and newer.
"""

import glob
import json
import os
import sys


def read_json(path):
    with open(path) as f:
        return json.load(f)


def tokenizer_fields(t):
    out = {k: t.get(k) for k in ("tokenizer_class", "auto_map", "chat_template", "additional_special_tokens")}
    added = t.get("added_tokens_decoder")
    if isinstance(added, dict):
        out["added_tokens_decoder"] = {k: {"content": v.get("content")} for k, v in added.items() if isinstance(v, dict)}
    return out


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
                    tokenizer = tokenizer_fields(t) if isinstance(t, dict) else None
                except (OSError, ValueError):
                    tokenizer = None
            template = None
            jinja = os.path.join(d, "chat_template.jinja")
            try:
                if os.path.isfile(jinja) and os.stat(jinja).st_size <= 1000000:
                    with open(jinja, encoding="utf-8") as fh:
                        template = fh.read()
            except (OSError, ValueError):
                template = None
            out = {"config": read_json(f), "index": read_json(idx) if os.path.isfile(idx) else None,
                   "sizes": sizes, "dir": d, "tokenizer": tokenizer, "chat_template": template}
            sys.stdout.write(json.dumps(out))
            sys.exit(0)
    sys.exit(3)


if __name__ == "__main__":
    main(sys.argv[1])
