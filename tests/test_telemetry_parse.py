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
