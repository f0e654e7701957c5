"""Telemetry data: the NA value, reporter lines, nvidia-smi's CSV."""

from __future__ import annotations

import json
import math

from gpuops.core.hosts.programs import reporter
from gpuops.core.telemetry.samples import (
    MIB,
    NA,
    NVSMI_FIELDS,
    is_na,
    parse_nvsmi_apps,
    parse_nvsmi_gpu_line,
    parse_report_line,
    plain,
)


def test_na_prints_na_and_behaves_like_nan():
    assert str(NA) == "N/A" and repr(NA) == "N/A"
    assert f"{NA:>6.1f}" == "   N/A" and f"{NA:.0f}" == "N/A"
    assert math.isnan(NA + 1) and not (NA > 0) and not (NA < 0)
    assert not NA and is_na(NA) and is_na(None) and not is_na(0)
    assert plain(NA) is None and plain(3) == 3


def test_nvsmi_line_with_na_fields():
    line = "3, GPU-abc, NVIDIA H200, 143771, 61234, 616, 98, 612.45, 64, 1980"
    g = parse_nvsmi_gpu_line(line)
    assert (g.index, g.uuid, g.name) == (3, "GPU-abc", "NVIDIA H200")
    assert g.memory_total == 143771 * MIB and g.memory_used == 61234 * MIB and g.memory_reserved == 616 * MIB
    assert (g.util, g.power_w, g.temp_c, g.sm_clock) == (98, 612.45, 64, 1980)
    g = parse_nvsmi_gpu_line("0, GPU-x, NVIDIA H200, 143771, 0, [N/A], [N/A], [N/A], 31, [N/A]")
    assert g.memory_used == 0 and is_na(g.memory_reserved) and is_na(g.util) and is_na(g.power_w)
    assert g.to_json()["util_percent"] is None and g.to_json()["memory_used_bytes"] == 0
    # An error message is not a row
    assert parse_nvsmi_gpu_line('Field "memory.reserved" is not a valid field to query.') is None
    fields = tuple(f for f in NVSMI_FIELDS if f != "memory.reserved")
    g = parse_nvsmi_gpu_line("1, GPU-y, NVIDIA H100, 81559, 100, 5, 70.00, 40, 1755", fields)
    assert g.index == 1 and is_na(g.memory_reserved)


def test_nvsmi_apps():
    text = "GPU-a, 1234, 11018, python3\nGPU-a, 99, [N/A], [Not Found]\nGPU-b, 7, 512, /usr/bin/x\n"
    procs = parse_nvsmi_apps(text)
    assert [(p.pid, p.used_bytes, p.command) for p in procs["GPU-a"]][0] == (1234, 11018 * MIB, "python3")
    assert is_na(procs["GPU-a"][1].used_bytes) and procs["GPU-a"][1].command is None
    assert procs["GPU-b"][0].pid == 7


def test_report_line_roundtrip_from_the_real_collector():
    """The in-process collector (this machine: no NVIDIA driver) yields a line that parses."""
    sample = reporter.Collector().sample()
    snap = parse_report_line(json.dumps(sample))
    assert snap is not None and snap.host is not None
    assert snap.host.mem_total > 0 and snap.host.disks and snap.host.disks[0].total_bytes > 0
    assert any(d.mount == "/" for d in snap.host.disks)
    if not snap.nvml.ok:  # CPU machines: a hint, never a traceback
        assert snap.nvml.code in ("no-driver", "driver-not-loaded") and snap.nvml.hint
        assert snap.gpus == []
    assert parse_report_line("Traceback (most recent call last):") is None
    assert parse_report_line('{"v": 2}') is None


def test_reporter_main_once_prints_one_json_line(capsys):
    assert reporter.main(["--once"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and json.loads(out[0])["v"] == 1
    assert reporter.main(["--bogus"]) == 2


def _report(gpus: int = 3, changes: dict | None = None) -> dict:
    rows = [{"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA H200", "memory_total_bytes": 150 * 2**30,
             "memory_used_bytes": i * 2**30, "memory_reserved_bytes": 2**29, "util_percent": 10 * i,
             "power_w": 75.0, "temp_c": 31, "sm_clock_mhz": 345,
             "processes": [{"pid": 100 + i, "user": "u", "command": "python -m sglang --api-key sk-x", "used_bytes": 2**30}]}
            for i in range(gpus)]
    for (index, field), value in (changes or {}).items():
        rows[index][field] = value
    return {"v": 1, "t": 1.0, "host": {"hostname": "h", "cpu_percent": 5.0, "mem_total_bytes": 8, "mem_used_bytes": 4,
                                      "disks": []}, "nvml": {"ok": True}, "gpus": rows}


def test_a_hosts_unchanged_gpu_rows_keep_their_samples():
    """A stream's lines (parse_report_line with the host's `rows`): a GPU whose row did not change
    gives the same GpuSample as the line before, one that changed a new one; either way the snapshot
    is what a line parsed alone gives."""
    rows: dict = {}
    first = parse_report_line(json.dumps(_report()), rows)
    again = parse_report_line(json.dumps(_report()), rows)
    assert first == again == parse_report_line(json.dumps(_report()))
    assert all(a is b for a, b in zip(first.gpus, again.gpus))
    assert again.gpus[0].processes[0].command == "python -m sglang --api-key ***"  # still redacted

    changed = parse_report_line(json.dumps(_report(changes={(1, "util_percent"): 99})), rows)
    assert changed == parse_report_line(json.dumps(_report(changes={(1, "util_percent"): 99})))
    assert changed.gpus[0] is again.gpus[0] and changed.gpus[2] is again.gpus[2]
    assert changed.gpus[1] is not again.gpus[1] and changed.gpus[1].util == 99

    fewer = parse_report_line(json.dumps(_report(gpus=2)), rows)  # a GPU left: its row is forgotten
    assert [g.index for g in fewer.gpus] == [0, 1] and sorted(rows) == [0, 1]
    failed = _report()
    failed["gpus"][0] = {"index": 0, "error": "handle unavailable"}
    snap = parse_report_line(json.dumps(failed), rows)
    assert [g.index for g in snap.gpus] == [1, 2] and sorted(rows) == [1, 2]


def test_redact_tries_its_patterns_only_where_they_can_match():
    """The fast way (each pattern tried where its matches can start) masks exactly what every pattern
    scanning the whole text masks: on mixes of the secrets' spellings, long lines, non-ASCII text."""
    import random

    from gpuops.core import redact as r

    frags = ["--api-key", "--api-key=", "api_key", "API_KEY", "Api-Key", "apikey", "hftoken", "hf_token", "HF-TOKEN",
             "access_token", "accessToken", "authtoken", "auth-token", "password", "PASSWD", "secret", "SECRET",
             "TOKEN", "token", "Bearer", "bearer", "hf_", "sk-gpuops-", "=", "='", '="', ": ", "':", "'", '"', ",",
             " ", "\t", "None", "null", "***", "${GPUOPS_API_KEY}", "abc", "XYZ123", "a" * 25, "hf_" + "A" * 25,
             "x", "_", "-", ")", "]", "}", "\n", "é", "İ", "K"]
    rng = random.Random(14)
    for _ in range(20000):
        text = "".join(rng.choice(frags) for _ in range(rng.randint(1, 14)))
        assert r.redact(text) == r._redact_everywhere(text), text
    args = ", ".join(f"arg{i}={i}" for i in range(2000))
    line = f"server_args=ServerArgs({args}, api_key='sk-1', hf_token=None, password=hunter2 {args})"
    assert r.redact(line) == r._redact_everywhere(line)
    assert "api_key='***'" in r.redact(line) and "password=***" in r.redact(line) and "hf_token=None" in r.redact(line)
    for _, needs, starts in r._PATTERNS:  # a text holding a pattern's needle holds one of its starts
        assert all(any(s in n for s in starts) for n in needs)
