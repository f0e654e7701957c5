"""Nothing outside SGLang's engine package spells SGLang (issue 24, item 2: "git grep -il sglang --
'*.py' outside tests finds it only inside the SGLang engine package").

What is SGLang's (its flags, versions, phase grammar, finding rules, words) is reached through the
engine (``engines.get(plan.engine)``); the JSON and store keys that kept its name come from its
package (``core/engines/sglang/keys.py``, through ``engines.plan_key``). The allow-lists below are
short on purpose: each entry says why, and an entry whose file no longer spells SGLang fails the
test (take it off)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("core", "cli", "screens", "tui", "themes", "sim", "scripts")  # the product's and its tools' (not src/: links)
ENGINE_PACKAGE = "core/engines/sglang"
WORD = re.compile("sglang", re.IGNORECASE)

# Plain text for the operator: the CLI contract's options that carry SGLang's name (`plan`/`deploy`'s
# --sglang-version, `sim setup`'s --sglang-version and --sglang-venv, with their argparse dests; cli/sim.py
# reads only their dests) and help that names SGLang as the default engine (the program's description,
# `bench`'s help).
CLI_TEXT = {"cli/plan.py", "cli/main.py", "cli/bench.py", "cli/sim.py"}

def spelled(root: Path, folders: tuple[str, ...] = FOLDERS, engine_package: str = ENGINE_PACKAGE) -> set[str]:
    """The .py files (paths relative to `root`) under `folders` that spell SGLang, its engine package left out."""
    found = set()
    for folder in folders:
        for path in (root / folder).rglob("*.py"):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(engine_package + "/") or "__pycache__" in rel:
                continue
            if WORD.search(path.read_text(encoding="utf-8", errors="replace")):
                found.add(rel)
    return found


def test_only_the_engine_package_spells_sglang():
    found = spelled(REPO)
    outside = sorted(found - CLI_TEXT)
    assert not outside, ("these files spell SGLang outside core/engines/sglang/ (reach it through the engine: "
                         "engines.get(plan.engine)):\n" + "\n".join(outside))
    stale = sorted(CLI_TEXT - found)
    assert not stale, "no longer spell SGLang: take them off this test's allow-lists:\n" + "\n".join(stale)


def test_the_check_names_a_file_that_spells_it(tmp_path):
    """The check can fail: a comment, an identifier or a string outside the engine package is named,
    in any case; the engine package's own files are not."""
    (tmp_path / "core" / "planning").mkdir(parents=True)
    (tmp_path / "core" / "engines" / "sglang").mkdir(parents=True)
    (tmp_path / "core" / "planning" / "a.py").write_text("x = 1  # what SGLang says\n")
    (tmp_path / "core" / "planning" / "b.py").write_text("sglang_version = None\n")
    (tmp_path / "core" / "planning" / "c.py").write_text("y = 'the engine'\n")
    (tmp_path / "core" / "engines" / "sglang" / "engine.py").write_text("title = 'SGLang'\n")
    assert spelled(tmp_path, ("core",)) == {"core/planning/a.py", "core/planning/b.py"}
