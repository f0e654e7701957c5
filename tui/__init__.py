"""gpuops.tui: the Textual dashboard.

Textual paces its frames: a change waits for the screen's next frame, at most 1/TEXTUAL_FPS seconds
(default 60: a key press could wait 16.7 ms before its frame even started). gpuops asks for frames
at up to 120 a second unless TEXTUAL_FPS says otherwise, so a key's frame starts within 8.3 ms. A
frame is only drawn when something changed: a log that flows repaints at its own pace (the log view
sizes and repaints at most 30 times a second), not 120 times. Set here, before any module of the
package imports Textual (which reads it once, as it is imported).
"""

import os

os.environ.setdefault("TEXTUAL_FPS", "120")


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
