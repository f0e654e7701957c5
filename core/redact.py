"""Secrets out of everything gpuops shows or stores: one function, used at every place text from a
host (a log line, a process's command line, a server's /server_info) enters gpuops.

gpuops' own servers never show their API key (the launcher keeps it out of argv and masks it in
their output); this catches the rest: a server started by hand or by another tool, an older
deployment, an HF token someone put in a command line. What is masked, as the engine and the usual
tools print it:

- ``--api-key KEY``, ``--api-key=KEY``, and in a printed list ``'--api-key', 'KEY'`` (also
  ``--admin-api-key`` and ``--ssl-keyfile-password``);
- ``api_key='KEY'``, ``'api_key': 'KEY'``, ``"api_key": "KEY"``, ``api_key=KEY`` (also ``hf_token``, ``access_token``,
  ``auth_token``, ``password``, ``secret`` fields of that form, a name with ``_``, ``-`` or nothing
  inside: ``hfToken``; not a bare ``token``: the engine's ``#token: N``); ``None``/``null``/empty stay;
- ``Authorization: Bearer KEY`` / ``Bearer KEY``;
- ``NAME=VALUE`` for secret environment names (``HF_TOKEN``, ``*_API_KEY``, ``*_TOKEN``, ...);
- Hugging Face tokens (``hf_…``) and gpuops' own keys (``sk-gpuops-…``) wherever they stand.

The mask is ``***``; gpuops' placeholder ``${GPUOPS_API_KEY}`` is no secret and stays as it is.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

_VALUE = r"""(?!None\b|null\b|\*\*\*|\$\{GPUOPS_API_KEY\})[^\s'",)}\]]+"""
_FIELD = r"(?:api[_-]?key|hf[_-]?token|access[_-]?token|auth[_-]?token|password|passwd|secret)"
# (pattern, the substrings of the lowercased text one of which it needs, the substrings of the
# lowercased text every one of its matches starts with): a pattern runs only on text that holds one
# of the first, so the log lines that hold none (nearly all) cost a few `in` tests; and on ASCII text
# only where one of the second stands (a server_args line is 18 KB: scanned whole by six patterns, it
# cost milliseconds). Every match of a pattern starts with one of its starts, so both ways find the
# same matches; a new pattern needs its starts listed with it (tests/test_telemetry_parse.py checks).
# A start may be shorter than the spellings it stands for (``hf`` for ``hf_token``, ``hf-token``,
# ``hftoken``): each start costs a scan of the whole text, the place it is found a `match` try.
_PATTERNS = (
    # --api-key KEY / --api-key=KEY / '--api-key', 'KEY' (and the engine's other secret flags)
    (re.compile(r"""(--(?:api-key|admin-api-key|ssl-keyfile-password)(?:=|['"]?,?\s+['"]?))""" + _VALUE),
     ("--api-key", "--admin-api-key", "--ssl-keyfile-password"), ("--api-key", "--admin-api-key", "--ssl-keyfile-password")),
    # api_key='KEY' / 'api_key': 'KEY' / "api_key": "KEY" / api_key=KEY (also admin_api_key, ssl_keyfile_password)
    (re.compile(r"""((?<![A-Za-z0-9])""" + _FIELD + r"""['"]?\s*[:=]\s*['"]?)""" + _VALUE, re.IGNORECASE),
     ("api_key", "api-key", "apikey", "hf_token", "hf-token", "hftoken", "access_token", "access-token",
      "accesstoken", "auth_token", "auth-token", "authtoken", "passw", "secret"),
     ("api", "hf", "access", "auth", "passw", "secret")),
    # Authorization: Bearer KEY
    (re.compile(r"(\bBearer\s+)" + _VALUE, re.IGNORECASE), ("bearer",), ("bearer",)),
    # HF_TOKEN=… OPENAI_API_KEY=… GPUOPS_API_KEY=… (environment listings, `env` output)
    (re.compile(r"((?:API_KEY|TOKEN|SECRET|PASSWORD)=['\"]?)" + _VALUE), ("api_key=", "token=", "secret=", "password="),
     ("api_key=", "token=", "secret=", "password=")),
    # Hugging Face tokens and gpuops' own keys, wherever they stand
    (re.compile(r"(\bhf_)[A-Za-z0-9]{20,}"), ("hf_",), ("hf_",)),
    (re.compile(r"(\bsk-gpuops-)[A-Za-z0-9_-]+"), ("sk-gpuops-",), ("sk-gpuops-",)),
)


# _PATTERNS, each with whether its needles are its starts (then at the starts one scan finds both)
_STEPS = tuple((pattern, needs, starts, needs == starts) for pattern, needs, starts in _PATTERNS)
# The starts found by scanning (each other start holds one of them: "api" in "--api-key" and "api_key=",
# "hf" in "hf_", "secret" in "secret=", "passw" in "password="), and each start as (the scanned one it
# holds, where): a long text is scanned once per scanned start, not once per start of every pattern.
_SCANNED = tuple(dict.fromkeys(
    st for _, _, starts in _PATTERNS for st in starts
    if not any(other != st and other in st for _, _, more in _PATTERNS for other in more)))
_FOUND_IN = {st: next((sc, st.find(sc)) for sc in _SCANNED if sc in st) for _, _, starts in _PATTERNS for st in starts}
# In a long text (a server_args line is 18 KB) the places of a scanned start are found by its literal
# pattern's scan, a quarter quicker there than str.find's (which wins on a short line). Its matches
# do not overlap, which finds them all: no scanned start begins with an end of itself (tested).
_LONG = 1024
_FIND_ALL = {sc: re.compile(re.escape(sc)).finditer for sc in _SCANNED}


def _mask(m: re.Match[str]) -> str:
    return m.group(1) + MASK


class _Starts:
    """Where each start stands in one lowercased text, each scanned start's places found once, when
    first asked for."""

    def __init__(self, low: str):
        self.low = low
        self._at: dict[str, list[int]] = {}

    def places(self, starts: tuple[str, ...]) -> list[int]:
        """The places in the text where one of `starts` stands, left to right, each once."""
        low, at = self.low, set()
        for st in starts:
            scanned, k = _FOUND_IN[st]
            found = self._at.get(scanned)
            if found is None:
                if len(low) > _LONG:
                    found = [m.start() for m in _FIND_ALL[scanned](low)]
                else:
                    found = []
                    i = low.find(scanned)
                    while i >= 0:
                        found.append(i)
                        i = low.find(scanned, i + 1)
                self._at[scanned] = found
            if st == scanned:
                at.update(found)
            else:
                at.update(i - k for i in found if i >= k and low.startswith(st, i - k))
        return sorted(at)


def _sub_at(pattern: re.Pattern[str], text: str, places: list[int]) -> str:
    """``pattern.sub(_mask, text)`` for a pattern whose every match starts at one of `places` (of its
    starts in ``text.lower()``, one character for one: ASCII text): the pattern is tried there
    only, left to right and never inside a match already made, as `sub` would find them."""
    if not places:
        return text
    out: list[str] = []
    end = 0
    match = pattern.match
    for i in places:
        if i < end:
            continue
        m = match(text, i)
        if m is not None:
            out += (text[end:i], m.group(1), MASK)
            end = m.end()
    if not out:
        return text
    out.append(text[end:])
    return "".join(out)


def redact(text: str) -> str:
    """`text` with every secret it shows replaced by ``***``. (Hot: every log line comes through, so
    the test that nearly every one stops at is here, not behind another call.)"""
    if not text:
        return text
    low = text.lower()  # the needles are looked for in the text as it came (one lower() a line)
    # "key" or "token=" or "hf_token" (…) or "hf_" or "bearer" or "passw" or "secret" or "sk-gpuops" in low
    # (every needle of _PATTERNS holds one): each tested only when low holds a letter of it
    # (one-character tests are a memchr, a fraction of a substring scan, and most log lines lack one
    # letter or another); "token=" and the field names that end in a token (hf_token, accesstoken, …)
    # in one regex scan ("num_tokens" and "#token:" are in every CUDA-graph and token-count line, and
    # are neither: most lines that hold "token" are let go by one look at the character after it and
    # one at the character before it)
    if not (("y" in low and "key" in low)
            or ("k" in low and (_TOKEN_GATE(low) is not None or "sk-gpuops" in low))
            or ("f" in low and "hf_" in low) or ("b" in low and "bearer" in low)
            or ("w" in low and "passw" in low) or ("c" in low and "secret" in low)):
        return text  # nearly every log line: no pattern below can match it
    # at the starts on ASCII text only: else lower() may change lengths, and IGNORECASE match non-ASCII letters
    return _apply(text, low, text.isascii())


# "token=", or a name of _FIELD that ends in a token (a look back at the character before "token"
# first: "_", "-" or the last letter of hf, access or auth)
_TOKEN_GATE = re.compile("token(?:=|(?<=[-_fsh]token)(?:"
                         + "|".join(f"(?<={name}{sep}token)" for name in ("hf", "access", "auth") for sep in ("_", "-", ""))
                         + "))").search


def _redact_everywhere(text: str) -> str:
    """:func:`redact` as each pattern scanning the whole text, and no precheck (what the fast way must
    equal: tests)."""
    return _apply(text, text.lower(), False)


def _apply(text: str, low: str, at_starts: bool) -> str:
    """Each pattern whose needle ``low`` (``text.lower()``) holds, applied in turn: at its starts, or
    over the whole text. A short text's needles are looked for first (a few quick tests, and most
    texts that come here hold none: "num_tokens" holds "_token"); a long one's only once a match was
    made at a start (a server_args line is 18 KB to scan for each needle, and a start is found in one
    scan of it). A pattern whose needles are its starts needs no second look: a start found is a needle."""
    found = _Starts(low)  # where the starts stand in the text as the patterns before changed it
    long = len(low) > _LONG
    for pattern, needs, starts, same in _STEPS:
        if at_starts:
            if not long and not any(n in low for n in needs):
                continue
            masked = _sub_at(pattern, text, found.places(starts))
            if masked is not text and (same or not long or any(n in low for n in needs)):
                text, found = masked, _Starts(masked.lower())
        elif any(n in low for n in needs):
            text = pattern.sub(_mask, text)
    return text


def redact_all(value: Any) -> Any:
    """`value` (JSON-like: dicts, lists, strings) with :func:`redact` applied to every string, and
    the value of a secret-named key masked whole."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: (MASK if isinstance(k, str) and _SECRET_KEY.search(k) and isinstance(v, str) and v
                    and v != "${GPUOPS_API_KEY}" else redact_all(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_all(v) for v in value]
    return value


# a key that names a secret, as _FIELD's names and the environment's (…_API_KEY, …_TOKEN) are written:
# api_key, apiKey, hf_token, accessToken, HF_TOKEN, client_secret, password, passwd
_SECRET_KEY = re.compile(r"(?:api[_-]?key|(?:^|[_-]|hf|access|auth)token|secret|passw(?:or)?d)$", re.IGNORECASE)
