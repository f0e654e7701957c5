"""Strings from a host are shown as literal text: model folders whose names hold Rich markup, OSC and
CSI escape sequences, a newline, a carriage return, a tab and a bidi override, and a GPU process
started as `python3 -c "<a script of several lines>"`, on a simulated host reached as the local
machine. Through the pilot (what the storage screen, its delete dialog, a notification and the
dashboard's process table draw), through the real terminal (tmux: the window's title is not
changed, the screen is not cleared, the host list is not drawn over) and through the CLI
(`gpuops models`, `models rm`: no escape byte reaches stdout, markup is text)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from gpuops.core.config import parse_inventory
from gpuops.core.literal import exact, literal
from gpuops.screens.confirm import ConfirmScreen
from gpuops.screens.storage import StorageScreen
from gpuops.sim.host import setup_simhost
from gpuops.tui.app import GpuopsApp
from gpuops.tui.widgets import RowTable
from tests.conftest import kill_marked
from tests.tui_helpers import screen_text, until

GPUOPS = str(Path(sys.executable).with_name("gpuops"))

# (the folder's name, what the screen must show for it)
HOSTILE = {
    "markup": "[red]x[/red]",
    "link": "[link=https:evil.example]y[/link]",  # (a name with a '/' is folders: [red]x[ holds red])
    "osc": "osc\x1b]0;PWNED\x07t",
    "csi": "csi\x1b[2J\x1b[31mred",
    "newline": "two\nlines",
    "cr": "cr\rback",
    "tab": "tab\there",
    "bidi": "bidi\u202etxt.exe",
}
SCRIPT = "import time\n# [red]evil[/red] \x1b]0;PWNED-PROC\x07\ntime.sleep(600)  # \t\x1b[2J\r"


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("GPUOPS_CONFIG", raising=False)


@pytest.fixture
def hostile(tmp_path):
    """A simulated 2-GPU host (local) whose model dir holds a model folder per hostile name, and a
    process holding GPU0's memory whose command line is a script of several hostile lines."""
    root = Path(tempfile.mkdtemp(prefix="hx-"))  # short: the paths fit the table's column
    models = root / "m"
    paths = {}
    for key, name in HOSTILE.items():
        folder = models / name
        folder.mkdir(parents=True)
        (folder / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"]}')
        (folder / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
        paths[key] = str(folder)
    sim = setup_simhost(root / "sim", gpus=2)
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(root)])
    sim.set_gpu(0, memory_used=3 * 1024**3, processes=[{"pid": proc.pid, "used": 3 * 1024**3}])
    block = sim.host_block("sim") + f'model_dirs = ["{models}"]\n'
    cfg = tmp_path / "config.toml"
    cfg.write_text(block)
    try:
        yield cfg, block, paths, proc
    finally:
        proc.kill()
        proc.wait()
        kill_marked(str(root))
        shutil.rmtree(root, ignore_errors=True)


def test_literal_escapes_what_a_terminal_acts_on_and_keeps_the_rest():
    assert literal("[red]x[/red] é 中文 a-b_c.d") == "[red]x[/red] é 中文 a-b_c.d"  # (markup is the widgets' part)
    assert literal("osc\x1b]0;t\x07 csi\x1b[2J") == "osc\\x1b]0;t\\x07 csi\\x1b[2J"
    assert literal("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert literal("bidi\u202etxt\u2066\u200b\u00a0\x85\x7f") == "bidi\\u202etxt\\u2066\\u200b\\xa0\\x85\\x7f"
    assert literal(None) == "" and literal(42) == "42"
    assert exact("/m/plain-name") == "/m/plain-name"
    assert exact("/m/a\x1bb") == "'/m/a\\x1bb'" and exact("/m/a\\x1bb") == "'/m/a\\\\x1bb'"  # told apart
    assert exact("/m/trailing ") == "'/m/trailing '"


async def test_the_storage_screen_its_dialog_and_notices_show_names_as_they_are(hostile):
    cfg, block, paths, _ = hostile
    app = GpuopsApp(parse_inventory(block, source=str(cfg)), interval=0.5)
    async with app.run_test(size=(200, 50)) as pilot:
        await app.push_screen(StorageScreen("sim"))
        screen = app.screen
        table = screen.query_one("#storage-models", DataTable)
        assert await until(pilot, lambda: table.row_count == len(HOSTILE), timeout=60), screen_text(app)
        # each model's row: its path, as literal text (markup not applied, escapes written out)
        cells = {str(table.get_row_at(i)[0]) for i in range(table.row_count)}
        assert cells == {literal(p) for p in paths.values()}
        drawn = screen_text(app)
        for key, path in paths.items():
            assert literal(path) in drawn, (key, drawn)
        assert "\x1b" not in drawn and "\u202e" not in drawn

        # the delete dialog names the exact path: the OSC one quoted, its escapes written out
        table.move_cursor(row=table.get_row_index(paths["osc"]))
        await pilot.press("ctrl+d")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        detail = str(app.screen.query_one("#confirm-detail", Static).render())
        assert exact(paths["osc"]) in detail and exact(paths["osc"]) == repr(paths["osc"])
        assert exact(paths["osc"]) in screen_text(app)
        await pilot.press("n")
        assert await until(pilot, lambda: app.screen is screen)
        assert os.path.isdir(paths["osc"])

        # the markup one: the question reads as the path is, and so does the notice once deleted
        table.move_cursor(row=table.get_row_index(paths["markup"]))
        await pilot.press("ctrl+d")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        question = str(app.screen.query_one("#confirm-question", Static).render())
        assert question == f"Delete {paths['markup']} from sim?"
        await pilot.press("y")
        assert await until(pilot, lambda: not os.path.exists(paths["markup"]), timeout=30)
        notes = app._notifications
        assert await until(pilot, lambda: any(n.message.startswith(f"deleted {paths['markup']} on sim, freed ")
                                              for n in notes), timeout=30)
        assert all(n.markup is False for n in notes)
        assert await until(pilot, lambda: table.row_count == len(HOSTILE) - 1, timeout=30)
        assert all(os.path.isdir(p) for k, p in paths.items() if k != "markup")


async def test_the_process_table_keeps_a_script_of_many_lines_on_its_row(hostile):
    cfg, block, _, proc = hostile
    app = GpuopsApp(parse_inventory(block, source=str(cfg)), interval=0.25)
    async with app.run_test(size=(200, 50)) as pilot:
        def procs() -> RowTable | None:
            found = app.screen.query("#procs")
            return found.first(RowTable) if found else None

        assert await until(pilot, lambda: procs() is not None and procs().row_count == 1, timeout=60)
        command = procs().get_row_at(0)[4]
        assert command == literal(" ".join(proc.args))  # (as /proc/PID/cmdline has it, on its one row)
        assert "\n" not in command and "\x1b" not in command and "\\n# [red]evil[/red] \\x1b]0;PWNED-PROC" in command
        drawn = re.sub(r"\s+", " ", screen_text(app))
        assert "sim local · live" in drawn  # the detail's header whole (it read "localhostlocal")
        assert "[red]evil[/red]" in drawn and str(proc.pid) in drawn


# a tmux server of this test's own (the other tests' sessions live on the default one)
SOCKET = f"gpuops-hx-{os.getpid()}"


def tmux(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["tmux", "-L", SOCKET, "-f", "/dev/null", *args], capture_output=True, text=True,
                          check=check)


def capture(session: str) -> str:
    return tmux("capture-pane", "-t", session, "-p").stdout


def pane_title(session: str) -> str:
    return tmux("display", "-p", "-t", session, "#{pane_title}").stdout.strip()


def wait_for(session: str, *needles: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = capture(session)
        if all(n in text for n in needles):
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"{[n for n in needles if n not in text]} never on the terminal:\n{text}")
        time.sleep(0.1)


def test_nothing_reaches_the_real_terminal(hostile, tmp_path):
    """In tmux at 200x50: the dashboard with the hostile process, then the storage screen with the
    hostile folders. The pane's title is never retitled by an OSC, the screen never cleared by a
    CSI, and the host list keeps its lines."""
    if not shutil.which("tmux"):
        pytest.fail("tmux is not installed: run the README's test command (it installs tmux)")
    cfg, _, paths, proc = hostile
    session = f"gpuops-hx-{uuid.uuid4().hex[:8]}"
    # (under pytest the pane's environment has COLUMNS=80 LINES=24, which Textual takes over the pane's size)
    env = (f"-u COLUMNS -u LINES TERM=xterm-256color XDG_STATE_HOME={tmp_path / 'state'} "
           f"XDG_CONFIG_HOME={tmp_path / 'cfg'} HOME={tmp_path}")
    tmux("new-session", "-d", "-s", session, "-x", "200", "-y", "50", f"env {env} {GPUOPS} --config {cfg}", check=True)
    try:
        before = pane_title(session)
        text = wait_for(session, "q Quit", f"{proc.pid}", "[red]evil[/red]")
        assert "PWNED" not in pane_title(session) and pane_title(session) == before
        lines = text.splitlines()
        assert any("sim  local  ·  live" in ln for ln in lines), text
        row = next(ln for ln in lines if str(proc.pid) in ln)
        assert "\\n# [red]evil[/red] \\x1b]0;PWNED-PROC" in row, text  # one row, its script escaped
        assert not any(ln.lstrip().startswith("time.sleep") for ln in lines), text  # no line of it drawn apart

        tmux("send-keys", "-t", session, "s", check=True)
        text = wait_for(session, "Storage sim", literal(paths["markup"]), literal(paths["link"]),
                        literal(paths["osc"]), literal(paths["newline"]))
        for key in ("csi", "cr", "tab", "bidi"):
            assert literal(paths[key]) in text, (key, text)
        assert "Storage sim" in text.splitlines()[1] + text.splitlines()[2]  # not cleared away (CSI 2J)
        assert "PWNED" not in pane_title(session) and pane_title(session) == before
    finally:
        tmux("kill-server")


def test_the_cli_prints_names_as_literal_text(hostile, tmp_path):
    cfg, _, paths, _ = hostile
    env = {k: v for k, v in os.environ.items() if k not in ("GPUOPS_CONFIG", "SSH_AUTH_SOCK")}
    env.update(HOME=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "state"), COLUMNS="200")
    res = subprocess.run([GPUOPS, "--config", str(cfg), "models", "--host", "sim"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for ch in ("\x1b", "\r", "\t", "\x07", "\u202e"):
        assert ch not in out, (ch, out)
    for key, path in paths.items():
        assert literal(path) in out.replace("\n", ""), (key, out)  # (a long path may fold onto the next line)
    # models rm of the markup one: the line says the very path it deleted
    res = subprocess.run([GPUOPS, "--config", str(cfg), "models", "rm", paths["markup"], "--host", "sim", "--yes"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"({paths['markup']})" in res.stdout and not os.path.exists(paths["markup"])
    # one that is ambiguous by its last part lists each candidate by its exact path
    res = subprocess.run([GPUOPS, "--config", str(cfg), "models", "rm", paths["osc"] + "-nothing", "--host", "sim",
                          "--yes"], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 2 and "\x1b" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_triage_of_a_log_prints_its_lines_as_literal_text(tmp_path):
    """A real crash log whose error line someone salted with an OSC, markup, a CSI, a tab, a BEL and
    a bidi override: `gpuops triage FILE` cites the line with each written out."""
    real = Path(__file__).parent / "data" / "logs" / "crash-graph-oom-traceback-only-0.5.10.log"
    salt = " \x1b]0;PWNED\x07 [red]x[/red] \x1b[2J\t\x07 \u202e "
    log = tmp_path / "crash.log"
    log.write_text(real.read_text().replace("torch.OutOfMemoryError: CUDA out of memory.",
                                            "torch.OutOfMemoryError: CUDA out of memory." + salt, 1))
    res = subprocess.run([GPUOPS, "triage", str(log)], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "GPUOPS_CONFIG"})
    assert res.returncode == 0, res.stderr
    cited = next(ln for ln in res.stdout.splitlines() if "torch.OutOfMemoryError" in ln)
    assert "[red]x[/red]" in cited and "\\t\\x07 \\u202e" in cited
    for ch in ("\x1b", "\x07", "\t", "\u202e", "\r"):
        assert ch not in res.stdout, ch


async def test_the_log_view_shows_each_line_as_literal_text():
    from textual.app import App

    from gpuops.tui.logview import LogView

    class One(App):
        def compose(self):
            yield LogView()

    app = One()
    async with app.run_test(size=(120, 10)) as pilot:
        view = app.query_one(LogView)
        view.append("loading \x1b]0;PWNED\x07 [red]x[/red]\r 50%\tdone \u202eexe\n")
        await pilot.pause()
        assert view.plain_lines() == ["loading \\x1b]0;PWNED\\x07 [red]x[/red]\\r 50%\\tdone \\u202eexe"]
        assert "loading \\x1b]0;PWNED\\x07 [red]x[/red]\\r 50%\\tdone" in screen_text(app)
