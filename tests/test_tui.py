"""The dashboard driven through Textual's pilot (App.run_test)."""

from __future__ import annotations

import json
import time

import pytest
from textual.widgets import Input

from gpuops.core.config import parse_inventory
from gpuops.screens.dashboard import DashboardScreen
from gpuops.screens.help import HelpScreen
from gpuops.tui.app import GpuopsApp
from gpuops.tui.widgets import RowTable
from tests.tui_helpers import screen_text, until


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


def inventory(extra: str = ""):
    text = "[hosts.localhost]\nlocal = true\n\n[hosts.deadbox]\nssh = \"root@127.0.0.1:1\"\n" + extra
    return parse_inventory(text, source="test.toml")


def host_names(app) -> list[str]:
    table = app.screen.query_one("#hosts", RowTable)
    return [table.get_row_at(i)[1] for i in range(table.row_count)]


async def test_dashboard_lists_hosts_and_shows_unreachable():
    app = GpuopsApp(inventory(), interval=0.2)
    async with app.run_test(size=(160, 45)) as pilot:
        assert isinstance(app.screen, DashboardScreen)
        assert host_names(app) == ["localhost", "deadbox"]
        # localhost answers (CPU/RAM/disks); deadbox refuses and says so
        assert await until(pilot, lambda: app.monitor.states["localhost"].updates >= 2)
        assert await until(pilot, lambda: app.monitor.states["deadbox"].reachable is False)
        assert await until(pilot, lambda: all(w in screen_text(app) for w in ("localhost", "Disk /", "RAM")))
        await pilot.press("down")
        assert app.screen.selected == "deadbox"
        assert await until(pilot, lambda: "cannot connect" in screen_text(app))
        assert "✖" in screen_text(app)


async def test_help_lists_the_screens_keys():
    app = GpuopsApp(inventory(), interval=0.5)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = dict(app.screen.keys)
        assert keys[":"] == "Cmd" and keys["/"] == "Filter" and keys["q"] == "Quit"
        assert keys["d"] == "Deploys" and keys["^t"] == "Theme"
        assert [k for k, _ in app.screen.keys[:3]] == [":", "/", "d"]  # the footer's keys first
        # gpuops' own keys only: none of Textual's built-ins (copy, page left/right, the palette's)
        assert not {"super+c", "^c", "^pgup", "^pgdn", "^q"} & set(keys), keys
        assert all(d not in ("Page Left", "Page Right", "Copy selected text") for d in keys.values()), keys
        assert keys["esc"] == "Back"  # not in the footer (it keeps q Quit at 80 columns), but here
        assert await until(pilot, lambda: "Keys: dashboard" in screen_text(app))
        assert ":host NAME" in screen_text(app)
        await pilot.press("escape")
        assert isinstance(app.screen, DashboardScreen)


async def test_jump_to_host_with_colon():
    app = GpuopsApp(inventory(), interval=0.5)
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.screen.selected == "localhost"
        await pilot.press("colon")
        cmd = app.screen.query_one("#cmdline", Input)
        assert cmd.display and cmd.has_focus
        await pilot.press(*"host deadbox", "enter")
        assert app.screen.selected == "deadbox" and not cmd.display
        assert app.screen.query_one("#hosts", RowTable).cursor_row == 1
        await pilot.press("colon", *"localhost", "enter")  # `:NAME` works too
        assert app.screen.selected == "localhost"
        await pilot.press("colon", *"host nope", "enter")
        assert await until(pilot, lambda: any("no host named 'nope'" in str(n.message) for n in app._notifications))
        assert app.screen.selected == "localhost"
        await pilot.press("colon", *"host dead")  # esc abandons the command line
        await pilot.press("escape")
        assert not cmd.display and app.screen.selected == "localhost"


async def test_theme_switch_is_remembered(tmp_path):
    app = GpuopsApp(inventory(), interval=0.5)
    async with app.run_test(size=(100, 30)) as pilot:
        assert app.theme == "gpuops-dark"
        await pilot.press("ctrl+t")
        assert await until(pilot, lambda: app.theme == "gpuops-light")
    state = json.loads((tmp_path / "state" / "gpuops" / "ui.json").read_text())
    assert state["theme"] == "gpuops-light"
    again = GpuopsApp(inventory(), interval=0.5)
    async with again.run_test(size=(100, 30)) as pilot:
        assert again.theme == "gpuops-light"
        await pilot.press("colon", *"theme gpuops-dark", "enter")
        assert await until(pilot, lambda: again.theme == "gpuops-dark")
    assert json.loads((tmp_path / "state" / "gpuops" / "ui.json").read_text())["theme"] == "gpuops-dark"


async def test_q_quits():
    app = GpuopsApp(inventory(), interval=0.5)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("q")
        assert await until(pilot, lambda: app._exit or not app.is_running)


async def test_a_tick_while_the_app_exits_is_nothing():
    """The refresh timer can fire once more after the app's screens are gone (it is stopped after
    them at exit): that tick does nothing, never ScreenStackError (a CI failure at a test's end)."""
    app = GpuopsApp(inventory(), interval=0.2)
    async with app.run_test(size=(100, 30)) as pilot:
        assert await until(pilot, lambda: app.monitor.states["localhost"].updates >= 1)
        app._tick()  # with a screen: refreshed
    assert not app.screen_stack
    app._tick()  # what the late timer runs: no screen, no error


async def test_readonly_and_simulated_are_labelled():
    app = GpuopsApp(inventory(), readonly=True, simulated=True, interval=0.5)
    async with app.run_test(size=(120, 30)) as pilot:
        assert await until(pilot, lambda: app.title == "gpuops · SIMULATED · READONLY")
        assert app.title == "gpuops · SIMULATED · READONLY"  # the header of every screen
        assert "SIMULATED" not in (app.screen.sub_title or "")  # said once, not again beside the title
        assert "READONLY" in screen_text(app)


async def test_command_palette_jumps_to_host():
    app = GpuopsApp(inventory(), interval=0.5)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause(0.2)
        await pilot.press(*"Host: deadbox")
        await pilot.pause(0.5)
        await pilot.press("enter")
        assert await until(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.selected == "deadbox")


async def test_stale_host_panel_says_how_stale(sshd):
    """A black-holed SSH host: its panel says how stale it is while localhost keeps updating."""
    from tests.sshd import TcpProxy
    from tests.test_monitor import ssh_host

    proxy = await TcpProxy(sshd.port).start(sshd)
    box = ssh_host(sshd, "box", proxy.port)
    inv = parse_inventory(f'[hosts.box]\nssh = "root@127.0.0.1:{proxy.port}"\n', source="t.toml")
    app = GpuopsApp(inv, interval=0.25, hosts=[box])
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            state = app.monitor.states["box"]
            assert await until(pilot, lambda: state.updates >= 2)
            # the screen shows it at its next tick (two samples may come closer together than a tick)
            assert await until(pilot, lambda: "live" in screen_text(app), timeout=10), screen_text(app)
            proxy.freeze()
            assert await until(pilot, lambda: "STALE: no data for" in screen_text(app), timeout=10)
            assert await until(pilot, lambda: "retrying in" in screen_text(app), timeout=15)
            row = app.screen.query_one("#hosts", RowTable).get_row("box")
            assert str(row[0]) in ("●", "✖")
    finally:
        await proxy.close()


async def test_a_host_whose_gpus_cannot_be_read_is_not_green(tmp_path):
    """A driver/library mismatch: the host answers, NVML does not; its row says so (▲, red) and
    the detail pane shows the hint."""
    from gpuops.core.config import parse_inventory
    from gpuops.screens.dashboard import host_status
    from gpuops.sim.host import setup_simhost

    sim = setup_simhost(tmp_path / "sim", gpus=2, nvml="mismatch")
    app = GpuopsApp(parse_inventory(sim.host_block("broken"), "config.toml"), interval=0.5)
    async with app.run_test(size=(160, 45)) as pilot:
        state = app.monitor.states["broken"]
        assert await until(pilot, lambda: state.snapshot is not None, timeout=20)
        assert host_status(state, time.monotonic()) == ("▲", "red bold")
        assert await until(pilot, lambda: "kernel module 580.159.04" in screen_text(app), timeout=10)


async def test_a_text_view_takes_the_rows_its_wrapped_text_needs():
    """A TextView of as many lines as before, but one that wraps to more (or fewer) rows, is laid out
    again: at 80x24 a detail cut after its first rows (or blank rows left behind) was the sign."""
    from textual.app import App
    from textual.containers import Vertical

    from gpuops.tui.widgets import TextView

    class One(App):
        CSS = "Vertical { width: 20; height: auto; }"

        def compose(self):
            with Vertical():
                yield TextView("short", id="v")

    app = One()
    async with app.run_test(size=(40, 12)) as pilot:
        view = app.query_one("#v", TextView)
        await pilot.pause()
        assert view.size.height == 1
        view.set("x" * 50)  # one line still, three rows at 20 columns
        assert await until(pilot, lambda: view.size.height == 3), view.size
        view.set("y" * 10)  # one line, one row again
        assert await until(pilot, lambda: view.size.height == 1), view.size
