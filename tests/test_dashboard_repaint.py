"""The dashboard redraws what changed, and only that: a GPU's sparkline when what its bars show
changed (not when its history merely grew by the same value), a host's row when a figure it shows
changed (not on every sample), and every visible change within one tick.

The monitor is stopped once the hosts have reported, and the hosts' states are then changed by
hand (as a sample would change them): each tick's effect is then known exactly, and the tests wait
for ticks (counted), never for time."""

from __future__ import annotations

import dataclasses
import random
import time

import pytest

from gpuops.core.config import parse_inventory
from gpuops.core.hosts.host import HostUnreachable
from gpuops.core.telemetry.samples import NvmlStatus
from gpuops.screens import dashboard
from gpuops.screens.dashboard import GpuRow, _visible, host_figures
from gpuops.sim.host import setup_simhost
from gpuops.tui.app import GpuopsApp
from tests.tui_helpers import until

GIB = 1024**3


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


def _fleet(tmp_path, names=("alpha", "bravo")):
    blocks = []
    for name in names:
        sim = setup_simhost(tmp_path / name, gpus=2)
        for i in range(2):
            sim.set_gpu(i, memory_used=(10 + 20 * i) * GIB, util=30 + 20 * i)
        blocks.append(sim.host_block(name))
    return parse_inventory("\n".join(blocks), source="fleet.toml")


class Ticks:
    """Counts the dashboard's host-list refreshes (one a tick, and one per filter/sort/selection
    change) and checks after each that every host's row is what its state makes now."""

    def __init__(self, screen):
        self.screen = screen
        self.n = 0
        self.wrong: list[tuple[str, tuple, tuple]] = []
        original = screen._refresh_hosts

        def counted(states, now):
            original(states, now)
            for name, state in states.items():
                want = host_figures(state, now)[0]
                have = screen._rows.get(name)
                if have != want or _styles(have) != _styles(want):
                    self.wrong.append((name, have, want))
            self.n += 1

        screen._refresh_hosts = counted

    async def next(self, pilot, count: int = 1) -> None:
        """Until `count` more ticks have run."""
        target = self.n + count
        assert await until(pilot, lambda: self.n >= target, timeout=20)


def _styles(cells):
    return None if cells is None else [str(span.style) for span in cells[0].spans]


async def _reported(app, pilot, names) -> None:
    states = app.monitor.states

    def ready() -> bool:
        return all(states[n].snapshot is not None and len(states[n].snapshot.gpus) == 2 for n in names)

    assert await until(pilot, ready, timeout=30)
    await app.monitor.close()  # from here on the states change only by hand


def _cells(app, name: str) -> list:
    return list(app.screen.query_one("#hosts").get_row(name))


def _resample(state, *, gpus=None, nvml=None, **host_fields):
    """The state's next sample: the same GPU rows (the very list) unless `gpus` is given, the host
    figures and NVML's state as they were unless given."""
    snap = state.snapshot
    host = dataclasses.replace(snap.host, **host_fields)
    state.record(dataclasses.replace(snap, host=host, gpus=snap.gpus if gpus is None else gpus,
                                     nvml=snap.nvml if nvml is None else nvml), time.monotonic())


def _changed(state, index: int, **fields) -> list:
    """The state's GPU rows with GPU `index` changed (a new list, the others' rows the same)."""
    gpus = list(state.snapshot.gpus)
    gpus[index] = dataclasses.replace(gpus[index], **fields)
    return gpus


async def test_an_unchanged_host_row_is_not_remade_a_changed_one_shows_at_the_next_tick(tmp_path, monkeypatch):
    made: list[str] = []

    def counted(state, now):
        made.append(state.name)
        return host_figures(state, now)

    app = GpuopsApp(_fleet(tmp_path), interval=0.25)
    async with app.run_test(size=(200, 50)) as pilot:
        await _reported(app, pilot, ("alpha", "bravo"))
        ticks = Ticks(app.screen)
        alpha, bravo = app.monitor.states["alpha"], app.monitor.states["bravo"]
        _resample(alpha)
        _resample(bravo)
        await ticks.next(pilot, 2)
        monkeypatch.setattr(dashboard, "host_figures", counted)

        # new samples that change nothing the row shows: the same GPU rows, RAM within its GiB
        for _ in range(3):
            _resample(alpha)
            _resample(bravo, mem_used=bravo.snapshot.host.mem_used + 1024)
            await ticks.next(pilot)
        assert made == []

        # GPU memory: a new list of GPU rows, shown at the next tick
        _resample(alpha, gpus=_changed(alpha, 0, memory_used=70 * GIB, util=90))
        await ticks.next(pilot)
        assert made == ["alpha"]
        assert _cells(app, "alpha")[3].startswith("100/") and _cells(app, "alpha")[4] == "70%"  # (70+30 GiB; 90, 50 %)

        # RAM by a whole GiB
        made.clear()
        ram = _cells(app, "bravo")[5]
        _resample(bravo, mem_used=bravo.snapshot.host.mem_used + 3 * GIB)
        await ticks.next(pilot)
        assert made == ["bravo"] and _cells(app, "bravo")[5] != ram

        # NVML failing: no GPU rows, the error symbol
        made.clear()
        _resample(alpha, gpus=[], nvml=NvmlStatus(ok=False, code="driver-mismatch", error="Driver/library mismatch"))
        await ticks.next(pilot)
        assert "alpha" in made
        row = _cells(app, "alpha")
        assert row[0].plain == "▲" and _styles(row) == ["red bold"] and row[2] == "0"
        assert ticks.wrong == []


async def test_a_host_going_stale_or_down_shows_it_at_the_next_tick(tmp_path):
    app = GpuopsApp(_fleet(tmp_path), interval=0.25)
    async with app.run_test(size=(200, 50)) as pilot:
        await _reported(app, pilot, ("alpha", "bravo"))
        ticks = Ticks(app.screen)
        await ticks.next(pilot, 2)
        alpha, bravo = app.monitor.states["alpha"], app.monitor.states["bravo"]
        _resample(alpha)
        _resample(bravo)
        await ticks.next(pilot)
        assert _styles(_cells(app, "bravo")) == ["green"] and _cells(app, "bravo")[6] == ""

        bravo.last_update = time.monotonic() - 30  # no sample for half a minute
        await ticks.next(pilot)
        row = _cells(app, "bravo")
        assert row[0].plain == "●" and _styles(row) == ["yellow"]  # the symbol's colour too, not only its text
        assert row[6].endswith("s") and int(row[6].rstrip("s")) >= 30  # stale for 30 s

        alpha.failed(HostUnreachable("connection refused"), retry_at=None)
        await ticks.next(pilot)
        row = _cells(app, "alpha")
        assert row[0].plain == "✖" and row[6] == "down"

        _resample(bravo)  # a sample again: fresh at the next tick
        await ticks.next(pilot)
        assert _styles(_cells(app, "bravo")) == ["green"] and _cells(app, "bravo")[6] == ""
        assert ticks.wrong == []


async def test_a_sparkline_is_redrawn_when_its_history_shows_something_new_and_only_then(tmp_path, monkeypatch):
    monkeypatch.setattr(dashboard, "HISTORY_REDRAW_S", 0.0)  # every tick looks at the histories
    app = GpuopsApp(_fleet(tmp_path), interval=0.25)
    async with app.run_test(size=(200, 50)) as pilot:
        await _reported(app, pilot, ("alpha", "bravo"))
        screen = app.screen
        ticks = Ticks(screen)

        def rows() -> dict[int, GpuRow]:
            return {row.index: row for row in screen.query(GpuRow)}

        def laid_out() -> bool:  # each sparkline drawn at its real width
            found = rows()
            return len(found) == 2 and all(
                key is not None and key[1] > 0 for row in found.values() for key in row._drawn.values())

        alpha = app.monitor.states["alpha"]
        _resample(alpha)  # (two values at least: one value draws otherwise)
        _resample(alpha)
        assert await until(pilot, laid_out, timeout=20)
        await ticks.next(pilot, 2)
        redrawn: dict[tuple[int, str], int] = {}
        for row in rows().values():
            def counted(which, spark, row=row, original=row._redraw_spark):
                redrawn[(row.index, which)] = redrawn.get((row.index, which), 0) + 1
                original(which, spark)

            row._redraw_spark = counted

        # samples that repeat the last: the histories grow, their (flat) lines do not change
        for _ in range(3):
            _resample(alpha)
            await ticks.next(pilot)
        assert redrawn == {}

        # GPU 0's memory changes: its memory line is redrawn, its utilisation's and GPU 1's are not
        _resample(alpha, gpus=_changed(alpha, 0, memory_used=90 * GIB))
        await ticks.next(pilot)
        assert set(redrawn) == {(0, "mem")}
        mem = rows()[0]._mem
        assert mem.data[-1] == 90.0 * GIB and mem.data[0] == 10.0 * GIB
        total = float(alpha.snapshot.gpus[0].memory_total)
        assert mem.bounds == (0.0, total) and rows()[0]._util.bounds == (0.0, 100.0)  # its scales: absolute
        assert rows()[1]._mem.data[-1] == 30.0 * GIB  # (its data kept current all along)

        # another host selected: its histories drawn at once (not at the next look), and of them only
        # the lines that look different from the other host's: here alpha's GPU 0 memory (a step)
        # becomes bravo's (flat), bravo's GPU 1 utilisation (a step) replaces alpha's (flat)
        monkeypatch.setattr(dashboard, "HISTORY_REDRAW_S", 3600.0)
        bravo = app.monitor.states["bravo"]
        _resample(bravo, gpus=_changed(bravo, 1, util=5))
        await ticks.next(pilot)
        redrawn.clear()
        assert screen.select_host("bravo")
        assert set(redrawn) == {(0, "mem"), (1, "util")}
        assert screen._history_host == "bravo"
        assert rows()[1]._util.data[-1] == 5.0 and rows()[0]._mem.data[-1] == 10.0 * GIB


def test_what_a_sparkline_shows_decides_its_redraw():
    """Data that `_visible` calls alike draw alike, segment for segment; data it tells apart draw
    differently (on the renderable the GPU rows use, at several widths and heights)."""
    from rich.color import Color
    from rich.console import Console

    from gpuops.screens.dashboard import _sparkline

    renderable = _sparkline().renderable_class
    console = Console(width=80, color_system="truecolor", force_terminal=True)

    def drawn(data, width, height, bounds=None):
        r = renderable(data, width=width, height=height, min_color=Color.from_rgb(10, 90, 200),
                       max_color=Color.from_rgb(250, 20, 30), summary_function=max, bounds=bounds)
        return [(s.text, s.style) for s in r.__rich_console__(console, console.options)]

    rng = random.Random(7)
    cases = [[5.0] * n for n in (2, 3, 40, 600)]  # flat, of any length: one look
    cases += [[0.0] * n + [1.0] for n in (1, 5, 59, 60, 61, 300)]
    cases += [[float(rng.choice((0, 1, 2))) for _ in range(rng.randrange(2, 700))] for _ in range(60)]
    cases += [[float(rng.choice((0, 1, 2)))] for _ in range(5)]  # one value
    for width, height, bounds in ((34, 1, None), (60, 1, None), (20, 2, None), (34, 1, (0.0, 4.0)), (20, 2, (0.0, 2.0))):
        by_key: dict[tuple, list] = {}
        for data in cases:
            by_key.setdefault(_visible(data, width, height, bounds), []).append(drawn(data, width, height, bounds))
        looks = set()
        for key, draws in by_key.items():
            assert all(d == draws[0] for d in draws), key
            looks.add(repr(draws[0]))
        assert len(looks) == len(by_key)  # different keys, different looks
    # a history that scrolled by repeats of its last value: the same look until a bucket changes
    hist = [2.0] * 300 + [1.0] * 300
    assert _visible(hist, 60, 1) == _visible(hist[1:] + [1.0], 60, 1)
    assert _visible(hist, 60, 1) != _visible(hist[20:] + [1.0] * 20, 60, 1)
