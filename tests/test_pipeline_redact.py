"""redact()'s fast paths change nothing: its precheck (each needle tested only when the text holds a
letter of it), its patterns' short starts and the one ``lower()`` it shares between them give what
every pattern run on the whole text gives wherever one of its needles stands, over every log line in
tests/data and mixes of the secrets' spellings."""

from __future__ import annotations

import random
from pathlib import Path

from gpuops.core import redact as r

DATA = Path(__file__).parent / "data"
FRAGS = ["--api-key", "--api-key=", "api_key", "API_KEY", "Api-Key", "apikey", "hftoken", "hf_token", "HF-TOKEN",
         "access_token", "accessToken", "authtoken", "auth-token", "password", "PASSWD", "secret", "SECRET",
         "TOKEN", "token", "Bearer", "bearer", "hf_", "sk-gpuops-", "=", "='", '="', ": ", "':", "'", '"', ",",
         " ", "\t", "None", "null", "***", "${GPUOPS_API_KEY}", "abc", "XYZ123", "a" * 25, "hf_" + "A" * 25,
         "x", "_", "-", ")", "]", "}", "\n", "é", "İ", "K", "#token: 12", "key", "KEY=", "y", "k", "f", "b", "w", "c"]


def _reference(text: str) -> str:
    """No precheck, no starts: each pattern whose needle the text holds, run on the whole text."""
    low = text.lower()
    for pattern, needs, _ in r._PATTERNS:
        if any(n in low for n in needs):
            text = pattern.sub(r._mask, text)
    return text


def test_redact_equals_the_reference_over_every_log_line():
    lines = [line for p in sorted(DATA.rglob("*.log")) for line in p.read_text(errors="replace").splitlines()]
    assert len(lines) > 1000
    for line in lines:
        assert r.redact(line) == _reference(line), line


def test_redact_equals_the_reference_on_mixes():
    rng = random.Random(2026)
    for _ in range(20000):
        text = "".join(rng.choice(FRAGS) for _ in range(rng.randint(1, 16)))
        assert r.redact(text) == _reference(text) == r._redact_everywhere(text), text
    for _ in range(300):  # long texts: their starts found by a scan of each start's literal pattern
        text = "".join(rng.choice(FRAGS) for _ in range(rng.randint(300, 900)))
        assert len(text) > r._LONG
        assert r.redact(text) == _reference(text) == r._redact_everywhere(text), text


def test_each_start_is_found_where_it_stands():
    """The scans behind redact's starts: every start of every pattern is, or holds, a scanned one, and
    no scanned start begins with an end of itself (its literal pattern's matches, which never
    overlap, are then all of its places)."""
    for _, _, starts in r._PATTERNS:
        for st in starts:
            scanned, at = r._FOUND_IN[st]
            assert st[at:at + len(scanned)] == scanned
    assert not any(sc[:k] == sc[-k:] for sc in r._SCANNED for k in range(1, len(sc)))


def test_long_lines_masked_at_every_start():
    args = ", ".join(f"arg{i}={i}" for i in range(2000))
    for secret in ("api_key='sk-1'", "hf_token='hf_x'", "HF-Token=abc", "access_token=abc", "authtoken: abc",
                   "Password=hunter2", "secret='s'", "Authorization: Bearer abc", "--api-key abc", "HF_TOKEN=abc"):
        line = f"server_args=ServerArgs({args}, {secret}, api_key=None, {args}, {secret})"
        assert r.redact(line) == _reference(line) == r._redact_everywhere(line), secret
        assert r.redact(line) != line, secret


def test_the_letter_test_lets_every_needle_through(monkeypatch):
    """redact()'s first test (letters, then the needles' groups) stops no text that holds a needle of
    any pattern, in any case: each such text reaches the patterns."""
    reached: list[str] = []
    monkeypatch.setattr(r, "_apply", lambda text, low, at_starts: reached.append(text) or text)
    needles = {n for _, needs, _ in r._PATTERNS for n in needs}
    for needle in sorted(needles):
        for text in (needle, needle.upper(), f"x {needle.title()} y"):
            reached.clear()
            r.redact(text)
            assert reached == [text], text
    reached.clear()
    r.redact("Capture target prefill CUDA graph begin. num_tokens=[256, 512], #token: 4")
    assert reached == []  # (what the token fields' own test keeps out)
