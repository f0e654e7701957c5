"""The genuine SGLang server refusing to start (see test_real_sglang.py): argparse's own errors, a port
SGLang needs already taken, and the HTTP port refused by gpuops before starting."""

from __future__ import annotations

import json
import re

import pytest

from tests.real_sglang import findings, held_port, last_state, local, log_lines, set_flag, shown, states  # noqa: F401 (fixtures, as parameters below)
from tests.sshd import free_port

pytestmark = pytest.mark.timeout(900)


@pytest.mark.parametrize("what, edit, flag, said", [
    pytest.param("bad-value", lambda doc: set_flag(doc["argv"], "--mem-fraction-static", "lots"),
                 "--mem-fraction-static", "error: argument --mem-fraction-static: invalid float value: 'lots'",
                 id="bad-value"),
])
def test_real_argument_errors(local, tiny_qwen3, what, edit, flag, said):
    """SGLang's argparse refuses a value before anything starts: crashed at starting, server-args-invalid
    citing argparse's own line. (A flag the server does not have never gets there: the next test.)"""
    local.configure(model_dirs=(tiny_qwen3.parent,))
    name = local.name(what)
    rc, events, err = local.deploy(local.plan(tiny_qwen3, name, free_port(), edit))
    assert rc == 1, err + shown(events)
    assert states(events) == ["planned", "starting", "crashed"], shown(events)
    assert last_state(events)["phase"] == "starting"
    assert any(line.endswith(said) for line in log_lines(events)), shown(events)
    (f,) = [f for f in findings(events) if f["code"] == "server-args-invalid"]
    assert f["severity"] == "error" and flag in f["summary"]
    assert any(ev["line"].endswith(said) for ev in f["evidence"])


def test_a_flag_the_real_server_does_not_have_is_refused_before_starting(local, tiny_qwen3):
    """The deploy reads the genuine SGLang's own `launch_server --help` on the host and refuses a flag it
    lacks before anything changes (the server used to die on it at start-up, argparse's 'unrecognized
    arguments'): exit 2, one line naming the flag, nothing recorded, nothing started."""
    local.configure(model_dirs=(tiny_qwen3.parent,))
    name = local.name("unknown-flag")
    rc, events, err = local.deploy(local.plan(tiny_qwen3, name, free_port(), lambda doc: doc["argv"].append("--no-such-flag")))
    assert rc == 2 and events == [], err
    assert re.search(r"SGLang 0\.5\.23 on cpu1 does not accept --no-such-flag: plan it again for this host", err), err
    assert err.count("\n") <= 1, err
    assert not local.dep_dir(name).exists()
    out = local.gpuops("status", "--json")
    assert name not in [d["name"] for d in json.loads(out.stdout)["deployments"]]


def test_a_port_sglang_needs_is_taken(local, tiny_qwen3, held_port):
    """The HTTP port is free but torch.distributed's (--nccl-port) is held: real SGLang's TCPStore
    fails at `Init parallel begin.` with EADDRINUSE: crashed in dist_init, port-in-use naming it."""
    local.configure(model_dirs=(tiny_qwen3.parent,))
    name = local.name("nccl-port")
    plan = local.plan(tiny_qwen3, name, free_port(), lambda doc: doc["argv"].extend(["--nccl-port", str(held_port)]))
    rc, events, err = local.deploy(plan)
    assert rc == 1, err + shown(events)
    last = last_state(events)
    assert last["state"] == "crashed" and last["phase"] == "dist_init", shown(events)
    eaddr = [line for line in log_lines(events) if "EADDRINUSE" in line and f"port: {held_port}" in line]
    assert eaddr, shown(events)
    (f,) = [f for f in findings(events) if f["code"] == "port-in-use"]
    assert str(held_port) in f["summary"] and any("EADDRINUSE" in ev["line"] for ev in f["evidence"])


def test_the_http_port_taken_is_refused_before_starting(local, tiny_qwen3, held_port):
    """gpuops' own check before anything changes: exit 2, one line, nothing recorded, nothing started."""
    local.configure(model_dirs=(tiny_qwen3.parent,))
    name = local.name("http-port")
    rc, events, err = local.deploy(local.plan(tiny_qwen3, name, held_port))
    assert rc == 2 and events == [], err
    assert re.search(rf"port {held_port} is in use on cpu1", err) and err.count("\n") <= 1, err
    assert not local.dep_dir(name).exists()
    out = local.gpuops("status", "--json")
    assert name not in [d["name"] for d in json.loads(out.stdout)["deployments"]]
