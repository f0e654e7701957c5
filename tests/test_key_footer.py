"""The footer every gpuops screen shows (KeyFooter, one widget drawing every key) paints what
Textual's Footer (a widget per key) painted: the same cells in the same styles, in both gpuops
themes, wide (the palette's key on the right) and under 120 columns (compact, no palette key, as
the stylesheet's `-narrow` rules made Textual's), with the mouse over a key, a disabled key and the
palette's key."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Static

from gpuops.themes import CSS_PATH, THEMES
from gpuops.tui.app import GpuopsApp
from gpuops.tui.widgets import KeyFooter


class Keys(Screen):
    BINDINGS = [
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("d", "deploys", "Deploys"),
        Binding("ctrl+k", "kill", "Kill"),  # disabled: dimmed
        Binding("x", "hidden", "Hidden", show=False),  # not shown
        Binding("y", "deploys", "Again"),  # a second key of an action: only the first is shown
    ]

    def __init__(self, footer: Widget) -> None:
        super().__init__()
        self.footer = footer

    def compose(self) -> ComposeResult:
        yield Static("keys")
        yield self.footer

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return None if action == "kill" else True


class FooterApp(App):
    """gpuops' stylesheet, themes and breakpoints; the screen's footer given."""

    CSS_PATH = CSS_PATH
    HORIZONTAL_BREAKPOINTS = GpuopsApp.HORIZONTAL_BREAKPOINTS
    BINDINGS = [Binding("q", "quit", "Quit"), Binding("question_mark", "help", "Keys", key_display="?")]

    def __init__(self, footer: Widget) -> None:
        super().__init__()
        self.footer = footer
        for theme in THEMES:
            self.register_theme(theme)

    def on_mount(self) -> None:
        self.push_screen(Keys(self.footer))


async def painted(footer: Widget, width: int) -> list[list[tuple[str, object]]]:
    """The bottom line, cell by cell (its character and style), for each theme and mouse position."""
    app = FooterApp(footer)
    seen = []
    async with app.run_test(size=(width, 8)) as pilot:
        for theme in THEMES:
            app.theme = theme.name
            # off the footer; a key; the disabled Kill; Filter (wide) or the column after it (compact);
            # the palette's key (wide) or no key
            for x in (None, 1, 21, 8, width - 3):
                await pilot.hover(Static, offset=(0, 0)) if x is None else await pilot.hover(offset=(x, 7))
                await pilot.pause()
                line = app.screen._compositor.render_strips()[-1]
                seen.append([(ch, seg.style.clear_meta_and_links() if seg.style else None)
                             for seg in line for ch in seg.text])
    return seen


async def test_the_footer_paints_what_textuals_footer_painted():
    for width, narrow in ((160, False), (80, True)):
        theirs = await painted(Footer(compact=narrow, show_command_palette=not narrow), width)
        ours = await painted(KeyFooter(), width)
        text = "".join(ch for ch, _ in ours[0])
        assert ("^p palette" in text) is not narrow and "Again" not in text and "Hidden" not in text, text
        assert len({str(line) for line in ours}) > len(THEMES), "the mouse over a key changes nothing"
        for i, (a, b) in enumerate(zip(theirs, ours, strict=True)):
            assert a == b, (width, i, "".join(ch for ch, _ in a), "".join(ch for ch, _ in b))
