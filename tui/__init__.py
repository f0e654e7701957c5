"""gpuops.tui: the Textual dashboard.

Textual paces its frames: a change waits for the screen's next frame. Its frame timer, once it has
drawn a frame, skips to the period after the next one (Textual 8's Timer: the count it skips to is
one too many), so a key press just after a frame waited between one and two periods before its own
frame began: 8-17 ms at 120 frames a second, 17-33 ms at Textual's default 60. gpuops asks for up to
500 a second unless TEXTUAL_FPS says otherwise (a key's frame then starts within 4 ms). A frame is
only drawn when something changed, so this is no busier: a log that flows repaints at its own pace
(the log view sizes and repaints at most 30 times a second), and the dashboard's own cost at 100 hosts
is unchanged (tests/perf/watch_cpu.py). Set here, before any module of the package imports Textual
(which reads it once, as it is imported).
"""

import os

os.environ.setdefault("TEXTUAL_FPS", "500")


def settle_heap() -> None:
    """Set what exists now aside from the cyclic garbage collector, for the rest of the process: call
    once start-up is done (the modules, Textual's classes and styles, the first screen). They live as
    long as the app, and a full collection that walked them took ~27 ms here, longer than a frame,
    every few hundred key presses or log batches; what is made later is collected as before.
    `release_heap` gives them back when the app ends (a process that runs several apps, as the
    tests do, would otherwise keep every ended app's cycles)."""
    import gc

    gc.collect()
    gc.freeze()


def release_heap() -> None:
    """What `settle_heap` set aside is the collector's again."""
    import gc

    gc.unfreeze()
