"""gpuops' registered Textual themes and its stylesheet."""

from __future__ import annotations

from pathlib import Path

from textual.theme import Theme

CSS_PATH = Path(__file__).with_name("gpuops.tcss")  # read before the first frame: shared rules, the dashboard's
SCREENS_CSS_PATH = Path(__file__).with_name("screens.tcss")  # the other screens', read when the first opens

DARK = Theme(
    name="gpuops-dark",
    primary="#4FA3E0",
    secondary="#7C8CF8",
    accent="#F0A04B",
    warning="#E5C07B",
    error="#E06C75",
    success="#98C379",
    foreground="#D7DAE0",
    background="#14171C",
    surface="#1B1F26",
    panel="#232933",
    dark=True,
    variables={"footer-key-foreground": "#F0A04B", "block-cursor-text-style": "bold"},
)

LIGHT = Theme(
    name="gpuops-light",
    primary="#0B5CAD",
    secondary="#5A4FCF",
    accent="#B35C00",
    warning="#8A6D00",
    error="#B3261E",
    success="#2E7D32",
    foreground="#1E2329",
    background="#F7F8FA",
    surface="#FFFFFF",
    panel="#E6E9EF",
    dark=False,
    variables={"footer-key-foreground": "#B35C00"},
)

THEMES = (DARK, LIGHT)
DEFAULT_THEME = DARK.name


def toggled(name: str) -> str:
    """The other theme of the dark/light pair (a foreign theme goes to ours: dark)."""
    return LIGHT.name if name == DARK.name else DARK.name
