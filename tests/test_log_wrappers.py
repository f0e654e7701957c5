"""What relaying programs put before each SGLang line, removed before the parser reads it: one case
per wrapper the real-log corpus has no public example of yet (tests/data/logs/real/README.md lists
them). The wrappers are written as each tool documents its own output format (docker logs -t,
journalctl -o short/short-precise/short-iso, srun --label, GitHub Actions' log timestamps, kubectl
logs --prefix/--timestamps); the SGLang lines after them are SGLang's own wording."""

from __future__ import annotations

import pytest

from gpuops.core.engines.sglang.phases import clean, track_log

SGL = "[2026-12-01 10:00:03 TP0] Load weight begin. avail mem=139.10 GB"
MSG = "Load weight begin. avail mem=139.10 GB"


@pytest.mark.parametrize("raw", [
    f"2026-12-01T10:00:03.123456789Z {SGL}",                          # docker logs -t / kubectl --timestamps
    f"2026-12-01 10:00:03 {SGL}",                                      # the space form some collectors write
    f"Dec 01 10:00:03 gpu1 python3[4242]: {SGL}",                     # journalctl -o short
    f"Dec 01 10:00:03.123456 gpu1 python3[4242]: {SGL}",              # journalctl -o short-precise
    f"2026-12-01T10:00:03+0000 gpu1 python3[4242]: {SGL}",            # journalctl -o short-iso
    f"0: {SGL}",                                                       # srun --label
    f"12: {SGL}",
    f"2026-12-01T10:00:03.1234567Z {SGL}",                             # GitHub Actions' log timestamps
    f"[pod/sglang-0/server] {SGL}",                                    # kubectl logs --prefix
    f"[pod/sglang-0/server] 2026-12-01T10:00:03.123456789Z {SGL}",     # --prefix --timestamps
    f"sglang-1  | {SGL}",                                              # docker compose logs
    f"sglang-1  | 2026-12-01T10:00:03.123456789Z {SGL}",               # docker compose logs -t
])
def test_a_relayed_line_is_read_as_the_servers_own(raw):
    line = clean(raw)
    assert line.text == MSG and line.ts == "2026-12-01 10:00:03" and line.ranks == {"TP": 0}


def test_a_journald_relayed_start_reaches_its_phases():
    lines = [f"Dec 01 10:00:{i:02d} gpu1 python3[4242]: [2026-12-01 10:00:{i:02d}{tp}] {msg}" for i, (tp, msg) in
             enumerate([("", "server_args=ServerArgs(model_path='m', tp_size=1)"),
                        (" TP0", "Init torch distributed begin."),
                        (" TP0", "Init torch distributed ends. mem usage=0.00 GB"),
                        (" TP0", "Load weight begin. avail mem=139.10 GB"),
                        (" TP0", "Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=123.00 GB, "
                                 "mem usage=16.10 GB.")])]
    tracker = track_log(lines)
    assert tracker.phase == "weights" and tracker.outcome == "incomplete"


def test_a_paste_nested_in_an_indented_block_is_read_as_if_it_were_not():
    # real case 057: a Markdown tab's code block shifts every line of the paste by four spaces
    from pathlib import Path

    log = Path(__file__).parent / "data/logs/real/057-tke-faq-heads-not-divisible-indented.log"
    lines = log.read_text().splitlines()
    assert all(ln.startswith("    ") for ln in lines)
    from gpuops.core.diagnose.triage import triage_log

    nested, flat = triage_log(lines), triage_log([ln[4:] for ln in lines])
    assert (nested.outcome, nested.phase) == (flat.outcome, flat.phase) == ("crashed", "weights")


def test_an_indented_first_line_that_is_not_the_servers_own_is_left_alone():
    tracker = track_log(["    some banner", "[2026-12-01 10:00:03 TP0] Load weight begin. avail mem=139.10 GB"])
    assert tracker.phase == "weights"
