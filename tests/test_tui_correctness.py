"""What the TUI shows is true, and every key says what it does (issue 23, second pass): through
Textual's pilot against a local simulated host (its GPUs' memory, its processes) and deployments
recorded in a store of the test's own."""

from __future__ import annotations

import subprocess

import pytest

from gpuops.core.config import parse_inventory
from gpuops.core.deploy.store import Store
from gpuops.screens.deployment import DeploymentScreen
from gpuops.screens.deployments import DeploymentsScreen
from gpuops.sim.host import setup_simhost
from gpuops.tui.app import GpuopsApp
from tests.plans import make_plan
from tests.tui_helpers import screen_text, until

GIB = 1024**3


@pytest.fixture
def box(tmp_path, monkeypatch):
    """A local simulated host `sim` (2 GPUs) and a store of the test's own; `add(name, state)` records a
    deployment of Qwen3-8B on GPU0 in that state."""
    for var, sub in (("HOME", "home"), ("XDG_STATE_HOME", "state"), ("XDG_CACHE_HOME", "cache"),
                     ("XDG_CONFIG_HOME", "config")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a model id typed is never looked up on the Hub
    sim = setup_simhost(tmp_path / "sim", gpus=2, pace=0.02)
    (tmp_path / "config.toml").write_text(sim.host_block("sim"))
    inv = parse_inventory(sim.host_block("sim"), source=str(tmp_path / "config.toml"))

    class Box:
        pass

    b = Box()
    b.sim, b.inv, b.tmp = sim, inv, tmp_path

    def add(name: str, state: str, plan=None, **fields):
        store = Store()
        try:
            plan = plan or make_plan(name, host="sim", python=str(sim.python), **fields)
            d = store.add_deployment("sim", plan, state=state)
            store.release_lease(name)  # (recorded, not being deployed: another gpuops may deploy it)
            return d
        finally:
            store.close()

    b.add = add
    b.holders = []

    def hold(gpu: int, gib: int) -> int:
        """A process of this test (its pid on GPU `gpu`, holding `gib` GiB there: the simulator drops
        the processes that do not exist)."""
        proc = subprocess.Popen(["sleep", "600"])
        b.holders.append(proc)
        sim.set_gpu(gpu, memory_used=gib * GIB, processes=[{"pid": proc.pid, "used": gib * GIB}])
        return proc.pid

    b.hold = hold
    yield b
    for proc in b.holders:
        proc.kill()
        proc.wait()
    sim.shutdown()
    subprocess.run(["pkill", "-f", str(tmp_path)])  # the servers this test's deployments started


def shown_in(screen, selector: str) -> str:
    """A TextView's text ("" until the screen has mounted it)."""
    found = screen.query(selector)
    return found.first().text.plain if found else ""


# ------------------------------------------------------------------ GPU memory is a running server's only


async def test_a_stopped_or_crashed_deployment_shows_no_gpu_memory_of_another(box):
    """Three deployments recorded on GPU0, which holds 50 GiB of the one that runs: only that one shows
    it; the stopped and the crashed one show "—" (the deployments view and their deployment screens)."""
    box.hold(0, 50)
    box.add("running", "ready")
    box.add("halted", "stopped")
    box.add("broken", "crashed")
    app = GpuopsApp(box.inv, interval=0.5)
    async with app.run_test(size=(160, 40)) as pilot:
        assert await until(pilot, lambda: app.monitor.states["sim"].snapshot is not None)
        app.open_deployments()
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentsScreen))
        view = app.screen
        assert await until(pilot, lambda: set(view.rows) == {"running", "halted", "broken"})
        assert await until(pilot, lambda: "50.0 GiB on 0" in str(view._cells["running"][6]))
        assert view._cells["halted"][6] == "—" and view._cells["broken"][6] == "—"
        assert screen_text(app).count("50.0 GiB on 0") == 1
        for name in ("halted", "broken"):
            assert app.open_deployment(name)
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
            screen = app.screen
            assert await until(pilot, lambda: "GPUs (sampler)" in shown_in(screen, "#dep-gpus"))
            shown = screen.query_one("#dep-gpus").text.plain
            assert "50.0" not in shown and "GPU0" not in shown and "— (no server" in shown, shown
            await pilot.press("escape")
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentsScreen))


# ------------------------------------------------------------------ read-only says so


def footer_keys(app, enabled: bool = True) -> dict[str, str]:
    """The footer's keys as it draws them (those on, or those off): description -> key."""
    from gpuops.tui.widgets import KeyFooter

    keys, _ = app.screen.query_one(KeyFooter)._keys_now()
    return {k.description: k.display for k in keys if k.enabled == enabled}


def struck(app, description: str) -> bool:
    """Whether the footer draws a key's description struck through and dim (off)."""
    from gpuops.tui.widgets import KeyFooter

    footer = app.screen.query_one(KeyFooter)
    seg = next(seg for seg in footer.render_line(0) if seg.text.strip() == description)
    return bool(seg.style and seg.style.strike and seg.style.dim)


def notices(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


def toasts(app) -> list[str]:
    """The notices as drawn (their markup, if any, applied)."""
    return [getattr(t.render(), "plain", str(t.render())).replace("\n", " ") for t in app.screen.query("Toast")]


async def test_readonly_offers_no_action_that_changes_a_host_and_its_key_says_why(box):
    from gpuops.screens.confirm import ConfirmScreen
    from gpuops.screens.help import HelpScreen

    box.add("ro", "ready")
    app = GpuopsApp(box.inv, interval=0.5, readonly=True)
    async with app.run_test(size=(160, 40)) as pilot:
        assert await until(pilot, lambda: "Plan" in footer_keys(app))
        assert "Kill" not in footer_keys(app) and "Kill" in footer_keys(app, enabled=False)  # ctrl+k ends a process
        assert struck(app, "Kill") and not struck(app, "Plan")  # off, and drawn so
        await pilot.press("ctrl+k")
        assert await until(pilot, lambda: any(n.startswith("read-only: ending a process") for n in notices(app)))
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("question_mark")
        assert await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert ("^k", "Kill: off, read-only") in app.screen.off_keys
        assert "Kill: off, read-only" in screen_text(app)
        await pilot.press("escape")

        app.open_deployments()
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentsScreen) and "ro" in app.screen.rows)
        view = app.screen
        offered = footer_keys(app)
        assert "Triage" in offered and "Back" in offered
        for off in ("Stop", "Restart", "Forget", "Bench", "Swap…"):
            assert off not in offered and off in footer_keys(app, enabled=False), offered
        assert struck(app, "Stop")
        for key, says in (("s", "stopping a server"), ("r", "a restart"), ("delete", "forgetting a deployment"),
                          ("b", "a benchmark"), ("n", "a swap")):
            before = len(notices(app))
            await pilot.press(key)
            assert await until(pilot, lambda: len(notices(app)) == before + 1), key
            assert notices(app)[-1].startswith(f"read-only: {says}"), notices(app)[-1]
            assert app.screen is view, key  # nothing asked, nothing opened
        await pilot.press("colon", *"stop ro", "enter")  # the command line refuses before asking too
        assert await until(pilot, lambda: notices(app)[-1].startswith("read-only: stopping a server"))
        await pilot.pause(0.2)
        assert app.screen is view
        await pilot.press("question_mark")
        assert await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert {key for key, _ in app.screen.off_keys} == {"s", "r", "del", "b", "n"}
    store = Store()
    try:
        assert store.deployment("ro").state == "ready"
    finally:
        store.close()


# ------------------------------------------------------------------ :swap


async def test_swap_is_on_help_and_without_a_name_says_what_it_needs(box):
    from gpuops.screens.help import HelpScreen
    from gpuops.screens.model_picker import ModelPickerScreen
    from textual.widgets import Input

    box.add("oldie", "ready")
    box.add("halted", "stopped")
    app = GpuopsApp(box.inv, interval=0.5)
    async with app.run_test(size=(160, 40), notifications=True) as pilot:  # (the notices drawn)
        await pilot.press("question_mark")
        assert await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert ":swap NAME [MODEL]" in screen_text(app)
        await pilot.press("escape")
        assert await until(pilot, lambda: not isinstance(app.screen, HelpScreen))
        await pilot.press("colon", *"swap", "enter")
        assert await until(pilot, lambda: any(n.startswith(":swap NAME [MODEL]: NAME is the ready deployment")
                                              for n in notices(app)))
        said = next(n for n in notices(app) if n.startswith(":swap NAME"))
        assert "ready now: oldie" in said and "halted" not in said
        assert await until(pilot, lambda: any(t.startswith(":swap NAME [MODEL]: NAME is the ready") for t in toasts(app)))
        assert not any("unknown command" in n for n in notices(app))
        await pilot.press("colon", *"swap oldie", "enter")
        assert await until(pilot, lambda: isinstance(app.screen, ModelPickerScreen))
        assert app.screen.swap_from == "oldie"
        await pilot.press("escape")
        await pilot.press("colon", *"swap oldie Qwen/Qwen3-8B", "enter")  # the model given: planned at once
        assert await until(pilot, lambda: isinstance(app.screen, ModelPickerScreen)
                           and app.screen.query("#model-input"))
        assert app.screen.swap_from == "oldie"
        assert app.screen.query_one("#model-input", Input).value == "Qwen/Qwen3-8B"
        assert await until(pilot, lambda: any(n.startswith("reading Qwen/Qwen3-8B and sim's") for n in notices(app)))
        await pilot.press("escape")
        assert app.open_deployment("halted")  # on a deployment's screen `:swap` is that deployment's
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
        await pilot.press("colon", *"swap", "enter")
        assert await until(pilot, lambda: any(n.startswith("halted is stopped: a swap replaces a ready deployment")
                                              for n in notices(app)))


# ------------------------------------------------------------------ a new run is followed


async def test_a_deployment_screen_follows_the_run_another_gpuops_starts(box, models):
    """The screen shows run 1 (stopped); another gpuops deploys the name again: the screen says
    "run 2 started" and shows run 2 come up, its phases and its log."""
    import json

    from gpuops.core.domain import Plan
    from gpuops.tui.logview import LogView
    from tests.test_cli import GPUOPS
    from tests.test_rules import sim_plan

    doc = sim_plan(models["qwen3"], "0.5.23", 1, name="again")
    doc.update(host="sim", launcher="process", python=str(box.sim.python))
    box.add("again", "stopped", plan=Plan.from_json(doc))
    (box.tmp / "again.json").write_text(json.dumps(doc))
    app = GpuopsApp(box.inv, interval=0.5)
    cli = None
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            assert app.open_deployment("again")
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen)
                               and "stopped" in shown_in(app.screen, "#dep-phases"))
            screen = app.screen
            assert screen.view.run == 1
            cli = subprocess.Popen([GPUOPS, "--config", str(box.tmp / "config.toml"), "deploy",
                                    str(box.tmp / "again.json"), "--host", "sim", "--yes"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert await until(pilot, lambda: screen.view.run == 2, timeout=60), cli.poll()
            assert await until(pilot, lambda: any(n == "again: run 2 started (shown now)" for n in notices(app)))
            assert await until(pilot, lambda: screen.view.state == "ready", timeout=90), \
                (screen.view.state, cli.poll())
            assert await until(pilot, lambda: "ready: http://127.0.0.1" in shown_in(screen, "#dep-phases"))
            log = screen.query_one(LogView).plain_lines()
            assert "── run 2 started ──" in log
            assert await until(pilot, lambda: any("fired up and ready" in line
                                                  for line in screen.query_one(LogView).plain_lines()), timeout=30)
            assert app.screen is screen
    finally:
        if cli is not None:
            cli.wait(timeout=120)
        subprocess.run([GPUOPS, "--config", str(box.tmp / "config.toml"), "stop", "again", "--yes"],
                       capture_output=True, timeout=120)


# ------------------------------------------------------------------ ctrl+k on a deployment's server


def _deploy_by_cli(box, models, name: str) -> None:
    """`name` deployed by another gpuops (the CLI), on the simulated host's GPU0, until ready."""
    import json

    from tests.test_cli import GPUOPS
    from tests.test_rules import sim_plan

    doc = sim_plan(models["qwen3"], "0.5.23", 1, name=name)
    doc.update(host="sim", launcher="process", python=str(box.sim.python))
    (box.tmp / f"{name}.json").write_text(json.dumps(doc))
    out = subprocess.run([GPUOPS, "--config", str(box.tmp / "config.toml"), "deploy", str(box.tmp / f"{name}.json"),
                          "--host", "sim", "--yes"], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr


async def test_ctrl_k_on_a_deployments_server_names_it_and_stops_it(box, models):
    """The dashboard's process table holds the server of deployment `served`: ctrl+k asks to stop
    `served` (naming it), and yes stops it as `stop` does: recorded stopped, not crashed."""
    from gpuops.screens.confirm import ConfirmScreen
    from gpuops.tui.widgets import RowTable

    _deploy_by_cli(box, models, "served")
    app = GpuopsApp(box.inv, interval=0.5)
    async with app.run_test(size=(170, 50)) as pilot:
        assert await until(pilot, lambda: app.screen.query("#procs"))  # mounted after the first frame
        procs = app.screen.query_one("#procs", RowTable)
        assert await until(pilot, lambda: procs.row_count == 1, timeout=30)
        procs.focus()
        await pilot.press("ctrl+k")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), timeout=30)
        pid = app.screen_stack[0].selected_process()[1].pid
        assert app.screen.question == f"Stop deployment served on sim? pid {pid} is its server", app.screen.question
        assert "recorded as stopped" in app.screen.detail
        from gpuops.core.ops import NeedsConfirmation
        with pytest.raises(NeedsConfirmation, match="is the server of deployment served"):  # the use case's own
            await app.ops.end_process("sim", pid, None, confirmed=True)  # (not said which: it asks, ends nothing)
        await pilot.press("y")
        assert await until(pilot, lambda: any(n.startswith("served stopped (") and f"pid {pid} was its server" in n
                                              for n in notices(app)), timeout=90), notices(app)
    store = Store()
    try:
        d = store.deployment("served")
        states = [e.state for e in store.events("served", kinds=("state",))]
    finally:
        store.close()
    assert d.state == "stopped" and "crashed" not in states, states


# ------------------------------------------------------------------ the phase list


def _record(name: str, *events) -> None:
    store = Store()
    try:
        for event in events:
            store.record(name, event)
    finally:
        store.close()


def _started(*phases: str) -> list:
    from gpuops.core.domain import PhaseEvent, StateEvent

    out: list = [StateEvent(state="starting")]
    for phase in phases:
        out += [PhaseEvent(phase=phase), StateEvent(state=phase)]
    return out


async def _phases_of(app, pilot, name: str) -> str:
    assert app.open_deployment(name)
    assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen)
                       and app.screen.deployment.name == name and shown_in(app.screen, "#dep-phases"))
    return shown_in(app.screen, "#dep-phases")


async def test_the_phase_list_marks_the_phase_that_crashed_and_only_a_draft_that_exists(box):
    """As the simulated host's runs record them (tests: the sim's kv-cache-oom, ok, ok-with-mtp):
    - a crash in kv_cache while the last phase line was the weights': ✖ on kv_cache, ✔ on weights;
    - a model without a draft: no draft row;
    - a model with one: the weights row keeps the model's 39 shards, the draft's 1 beside them."""
    from gpuops.core.domain import Finding, FindingEvent, ProgressEvent, StateEvent

    box.add("oom", "planned")
    _record("oom", *_started("dist_init", "weights"), ProgressEvent(phase="weights", done=5, total=5, what="shards"),
            FindingEvent.of(Finding("kv-cache-oom", "error", "No room was left for the KV cache")),
            StateEvent(state="crashed", phase="kv_cache"))
    box.add("plain", "planned")
    _record("plain", *_started("dist_init", "weights", "kv_cache", "cuda_graph", "http"),
            StateEvent(state="ready", endpoint="http://127.0.0.1:9"))
    box.add("mtp", "planned", argv=["--model-path", "Qwen/Qwen3-8B", "--speculative-algorithm", "NEXTN"])
    _record("mtp", *_started("dist_init", "weights"),
            ProgressEvent(phase="weights", done=39, total=39, what="shards"),
            ProgressEvent(phase="weights", done=0, total=1, what="draft shards"),
            ProgressEvent(phase="weights", done=1, total=1, what="draft shards"),
            *_started("kv_cache", "cuda_graph", "draft", "http")[1:],
            StateEvent(state="ready", endpoint="http://127.0.0.1:9"))
    box.add("halted", "planned")  # ready, then stopped: it got to ready (no phase is still under way)
    _record("halted", *_started("dist_init", "weights", "kv_cache", "cuda_graph", "http"),
            StateEvent(state="ready", endpoint="http://127.0.0.1:9"), StateEvent(state="stopped"))
    box.add("early", "planned")  # stopped in weights: where it stopped
    _record("early", *_started("dist_init", "weights"), StateEvent(state="stopped"))
    app = GpuopsApp(box.inv, interval=0.5)
    async with app.run_test(size=(160, 45)) as pilot:
        halted = await _phases_of(app, pilot, "halted")
        assert "✔ ready" in halted and "▶" not in halted, halted
        await pilot.press("escape")
        early = await _phases_of(app, pilot, "early")
        assert "✔ dist_init" in early and "■ weights" in early and "▶" not in early, early
        await pilot.press("escape")
        oom = await _phases_of(app, pilot, "oom")
        assert "✔ weights" in oom and "✖ kv_cache" in oom, oom
        assert "✖ weights" not in oom and "crashed in kv_cache" in oom
        await pilot.press("escape")
        plain = await _phases_of(app, pilot, "plain")
        assert "✔ http" in plain and "ready: http://127.0.0.1:" in plain
        assert "draft" not in plain, plain
        await pilot.press("escape")
        mtp = await _phases_of(app, pilot, "mtp")
        weights = next(line for line in mtp.splitlines() if "weights" in line)
        assert "shards 39/39" in weights and "draft shards 1/1" in weights, weights
        assert "✔ draft" in mtp
        await pilot.resize_terminal(80, 24)  # two phases a line: every one still there
        assert await until(pilot, lambda: app.screen.has_class("-narrow")
                           and "✔ http" in shown_in(app.screen, "#dep-phases"))
        assert "✔ draft" in shown_in(app.screen, "#dep-phases")


# ------------------------------------------------------------------ the stall banner


async def test_the_stall_banners_silence_keeps_counting(box):
    """A stall seen after 21 s of silence in dist_init, 40 s ago: the banner says how long it has
    been silent now (61 s and on), and the finding under it does not repeat the 21 s of then."""
    import re
    from datetime import datetime, timedelta, timezone

    from gpuops.core.diagnose.stall import Stall, stall_finding
    from gpuops.core.domain import FindingEvent, PhaseEvent, StateEvent

    def ago(seconds: float) -> str:
        return (datetime.now(timezone.utc) - timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")

    stall = Stall("dist_init", 21.0, 20.0, {0: 0}, 3, 2)
    box.add("stuck", "planned")
    _record("stuck", StateEvent(state="starting", ts=ago(62)), PhaseEvent(phase="dist_init", ts=ago(61)),
            StateEvent(state="dist_init", ts=ago(61)), FindingEvent.of(stall_finding(stall), ts=ago(40)),
            StateEvent(state="stalled", phase="dist_init", silent_s=21.0, summary=stall.summary, ts=ago(40)))
    app = GpuopsApp(box.inv, interval=0.5)
    async with app.run_test(size=(160, 45)) as pilot:
        assert app.open_deployment("stuck")
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen)
                           and "STALLED" in shown_in(app.screen, "#dep-banner"))

        def silent() -> int:
            m = re.search(r"STALLED: dist_init silent (\d+)m(\d+)s", shown_in(app.screen, "#dep-banner"))
            return int(m.group(1)) * 60 + int(m.group(2)) if m else -1

        first = silent()
        assert first >= 61, shown_in(app.screen, "#dep-banner")
        assert await until(pilot, lambda: silent() >= first + 2, timeout=10)  # it goes on counting
        banner = shown_in(app.screen, "#dep-banner")
        assert "21s" not in banner, banner
        assert "error: nccl-init-stall: " in banner


# ------------------------------------------------------------------ the model picker takes what is typed


async def test_the_model_picker_takes_an_id_typed_right_after_it_opens(box, models):
    """Typed as soon as the picker shows (its scan of the host done before the first key or not):
    every character lands in the id box; down goes to the host's copies, a letter there goes back to
    typing, and Enter on an empty box plans the highlighted copy."""
    from gpuops.screens.model_picker import ModelPickerScreen
    from textual.widgets import DataTable, Input

    inv = parse_inventory(box.sim.host_block("sim") + f'model_dirs = ["{models["qwen3"].parent}"]\n',
                          source=str(box.tmp / "config.toml"))
    app = GpuopsApp(inv, interval=0.5)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("p")  # the dashboard's Plan: the picker for the selected host
        assert await until(pilot, lambda: isinstance(app.screen, ModelPickerScreen))
        picker = app.screen
        title = picker.query_one("#picker-title")
        assert await until(pilot, lambda: "scanning" not in str(title.render()), timeout=30)
        await pilot.pause(0.3)  # (whatever the scan did with the focus, it has done)
        await pilot.press(*"Qwen/Qwen3-8B")
        box_ = picker.query_one("#model-input", Input)
        assert box_.value == "Qwen/Qwen3-8B", (box_.value, app.focused)
        table = picker.query_one("#candidates", DataTable)
        assert table.row_count >= 1  # the host's copies: Qwen3-8B, Qwen3.5's
        if True:
            box_.value = ""
            await pilot.press("down")  # to the host's copies
            assert app.focused is table
            await pilot.press("q")  # a letter: typing again (not the app's quit)
            assert app.focused is box_ and box_.value == "q"
            await pilot.press("backspace", "enter")  # Enter on an empty box: the highlighted copy
            picked = picker.copies[table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value][0]
            assert await until(pilot, lambda: any(n.startswith(f"reading {picked} and sim's") for n in notices(app)))


# ------------------------------------------------------------------ the TUI's words, not the CLI's flags


async def test_tui_notices_name_the_tuis_way_not_a_command_line_flag(box):
    """A port taken: the plan review's warning and the deploy's refusal say how to choose another
    port in the TUI (its `e`, then `port N`), not `--port`; a name taken likewise."""
    import dataclasses
    import socket

    from gpuops.core.planning.hostfacts import offline_target
    from gpuops.core.planning.plan import Wishes, with_deployment_ports
    from gpuops.screens.plan_review import PlanReviewScreen
    from tests.test_plan import H200, QWEN122, facts

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    port = held.getsockname()[1]
    try:
        app = GpuopsApp(box.inv, interval=0.5)
        async with app.run_test(size=(160, 50)) as pilot:
            target = with_deployment_ports(dataclasses.replace(offline_target(4, H200), host="sim"),
                                           [("other", "sim", "ready", port)])
            review = PlanReviewScreen(facts(*QWEN122), target, Wishes(tp=4, port=port, engine_version="0.5.23"))
            await app.push_screen(review)
            assert await until(pilot, lambda: review.plan is not None and shown_in(review, "#plan-warnings"))
            warned = shown_in(review, "#plan-warnings")
            assert f"port {port} is in use on sim" in warned, warned
            assert "choose another port (plan review: e, then port N)" in warned and "--port" not in warned
            await pilot.press("escape")

            # the deploy's own check (the port listens on the host): refused, in the TUI's words
            plan = make_plan("portfight", host="sim", python=str(box.sim.python), port=port)
            app.post_message(PlanReviewScreen.DeployRequested(plan))
            assert await until(pilot, lambda: any(f"port {port} is in use on sim" in n for n in notices(app)),
                               timeout=60), notices(app)
            said = next(n for n in notices(app) if f"port {port} is in use" in n)
            assert said.endswith("choose another port (plan review: e, then port N)") and "--" not in said, said

            # a name a running deployment has
            box.add("taken", "ready")
            app.post_message(PlanReviewScreen.DeployRequested(make_plan("taken", host="sim",
                                                                        python=str(box.sim.python))))
            assert await until(pilot, lambda: any("'taken' exists" in n for n in notices(app)), timeout=30), \
                notices(app)
            said = next(n for n in notices(app) if "'taken' exists" in n)
            assert "choose another name (plan review: e, then name NEW)" in said and "--name" not in said, said
    finally:
        held.close()


# ------------------------------------------------------------------ one unit for sizes


async def test_sizes_are_said_in_one_unit_on_every_screen(box, models):
    """The picker said a copy's size in GB (10^9) and storage in GiB: the same copy now reads the same
    on both; a download's progress and rate are in the same units."""
    from gpuops.core.domain import ProgressEvent
    from gpuops.screens.model_picker import ModelPickerScreen
    from gpuops.screens.storage import StorageScreen
    from textual.widgets import DataTable

    folder = models["qwen3"]
    (folder / "model-00001-of-00005.safetensors").write_bytes(b"\1" * (3 * 1024**2 + 5))  # a shard's bytes
    inv = parse_inventory(box.sim.host_block("sim") + f'model_dirs = ["{folder.parent}"]\n',
                          source=str(box.tmp / "config.toml"))
    store = Store()  # being deployed (its lease: this process's, alive): a download nobody runs is interrupted
    try:
        store.add_deployment("sim", make_plan("fetching", host="sim", python=str(box.sim.python)), state="downloading")
    finally:
        store.close()
    _record("fetching", ProgressEvent(phase="downloading", done=5_583_457_484, total=17_609_365_913,
                                      rate_bps=378_535_936))
    app = GpuopsApp(inv, interval=0.5)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.press("p")
        assert await until(pilot, lambda: isinstance(app.screen, ModelPickerScreen))
        picker = app.screen
        table = picker.query_one("#candidates", DataTable)
        assert await until(pilot, lambda: table.row_count >= 1, timeout=30)
        key = next(k for k, (_, path) in picker.copies.items() if path == str(folder))
        in_picker = str(table.get_row(key)[2])
        await pilot.press("escape")
        await app.push_screen(StorageScreen("sim"))
        storage = app.screen.query_one("#storage-models", DataTable)
        assert await until(pilot, lambda: storage.row_count >= 1, timeout=30)
        rows = [storage.get_row_at(i) for i in range(storage.row_count)]
        in_storage = next(str(r[1]) for r in rows if str(folder) in str(r[0]) or r[0] == picker.copies[key][0])
        assert in_picker == in_storage and in_picker.endswith("MiB"), (in_picker, in_storage)
        await pilot.press("escape")
        assert app.open_deployment("fetching")
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen)
                           and "downloading" in shown_in(app.screen, "#dep-phases"))
        assert "downloading 5.2 GiB / 16.4 GiB at 361.0 MiB/s" in shown_in(app.screen, "#dep-phases")


# ------------------------------------------------------------------ the swap's last question


async def test_the_swaps_last_question_y_keeps_the_new_one_and_r_rolls_back(box):
    """y goes ahead as everywhere: after the comparison it keeps the new deployment; the rollback is
    its own key (r), and esc changes nothing (keeps). After a crash the question proposes the
    rollback: y rolls back, n leaves it."""
    import asyncio

    from gpuops.screens.confirm import ConfirmScreen
    from gpuops.screens.swap import SwapScreen

    app = GpuopsApp(box.inv, interval=0.5)
    async with app.run_test(size=(120, 40)) as pilot:
        swap = SwapScreen("oldie", make_plan("newbie", host="sim"), None)  # its question alone (no swap runs)

        async def ask(what: dict, *keys: str) -> bool:
            task = asyncio.ensure_future(swap._keep(what))
            assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            dialog = app.screen
            assert await until(pilot, lambda: dialog.query("Button"))
            dialog.labels = [str(b.label) for b in dialog.query("Button")]
            await pilot.press(*keys)
            assert await until(pilot, task.done)
            return dialog, task.result()

        dialog, keep = await ask({"compare": {}}, "y")
        assert dialog.question == "Keep newbie, or roll back to oldie?"
        assert "y keeps newbie serving in oldie's place; r stops newbie and restarts oldie" in dialog.detail
        assert dialog.labels == ["Keep newbie (y)", "Roll back to oldie (r)"], dialog.labels
        assert keep is True
        assert (await ask({"compare": {}}, "r"))[1] is False  # r: roll back
        assert (await ask({"compare": {}}, "escape"))[1] is True  # esc: nothing stopped
        assert (await ask({"compare": {}}, "enter"))[1] is True  # Enter: the button in focus, Keep
        dialog, keep = await ask({"failed": "newbie crashed"}, "y")
        assert dialog.question == "newbie crashed: roll back to oldie now?" and keep is False  # y: the rollback
        assert (await ask({"failed": "newbie crashed"}, "n"))[1] is True  # n: left as it is
