"""What every verb shares: running a use case (gpuops.core.ops) with the command line's policy.

Exit codes: 0 ok; 1 the operation failed; 2 bad input or a refusal (one line on stderr, nothing
changed). A use case that wants a confirmation gets it from ``--yes`` or, on a terminal, from a
``[y/N]`` question; without either it is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, Awaitable, Callable, TypeVar

from ..core.config import Inventory

T = TypeVar("T")


def markup_literal(value: object) -> str:
    """A string from a host, a file or the store inside Rich markup that the CLI prints: its control
    characters escaped (gpuops.core.literal.literal, the one helper the screens use too), then its
    brackets escaped so that Rich reads them as text (``[red]x[/red]`` in a folder's name)."""
    from rich.markup import escape

    from ..core.literal import literal

    return escape(literal(value))


class UsageError(Exception):
    """Bad input or a refusal: printed as one line, exit code 2."""


def ask_terminal(question: str) -> bool:
    """A yes/no on the terminal (stdin a TTY); False otherwise."""
    if not sys.stdin.isatty():
        return False
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def run_use_case(inv: Inventory, args: argparse.Namespace, use: Callable[[Any, bool], Awaitable[T]], *,
                 yes: bool = False, store_read_only: bool = False) -> T:
    """``use(ops, confirmed)`` on a fresh :class:`~gpuops.core.ops.Ops`; asks (or wants --yes) when the
    use case needs a confirmation, then calls it again confirmed. ``store_read_only``: a store that
    cannot be opened to write (a full disk) is read only instead (stop: the server is stopped, and the
    use case says what it could not record)."""
    from ..core.deploy.store import NameTaken, Store, StoreError
    from ..core.hosts.host import HostError
    from ..core.ops import NeedsConfirmation, Ops, Refused

    async def go() -> T:
        readonly = bool(getattr(args, "readonly", False))
        try:
            ops = Ops(inv, readonly=readonly)
            ops.open_store()
        except StoreError as exc:
            if not store_read_only or isinstance(exc, NameTaken):
                raise
            try:
                store = Store.read_only(str(exc))
            except StoreError:
                raise exc from None
            ops = Ops(inv, readonly=readonly, store=store)
        try:
            try:
                return await use(ops, yes)
            except NeedsConfirmation as need:
                if not sys.stdin.isatty():
                    raise UsageError(f"{need.question.rstrip('?')} needs confirmation: add --yes") from None
                if not await asyncio.to_thread(ask_terminal, need.question):
                    raise UsageError("not done (answered no)") from None
                return await use(ops, True)
        finally:
            await ops.close()

    try:
        return asyncio.run(go())
    except Refused as exc:
        raise UsageError(str(exc)) from None
    except HostError as exc:
        raise OperationFailed(exc.message + (f"\nhint: {exc.hint}" if exc.hint else "")) from None


# Piped or redirected (`| grep`, `> file`): wide enough that no cell of a table is ever wrapped (a
# path is printed whole on its row's line); lines are as long as what they hold, never padded to it.
PIPED_WIDTH = 1 << 16


def console() -> Any:
    """The Rich console the verbs print their tables with: a terminal's own width (a long cell wraps
    in its column), or, when stdout is not a terminal, the width COLUMNS asks for (`COLUMNS=80 gpuops
    bench list | less`), else :data:`PIPED_WIDTH`."""
    import os

    from rich.console import Console

    if sys.stdout.isatty():
        return Console()
    asked = os.environ.get("COLUMNS", "")
    return Console(width=int(asked) if asked.isdigit() and 20 <= int(asked) <= PIPED_WIDTH else PIPED_WIDTH)


class OperationFailed(Exception):
    """The operation ran and failed (exit 1): the message goes to stderr."""


def minute(ts: str | None) -> str:
    """An RFC 3339 UTC time to the minute, for a line of a list: `2026-12-02 00:23Z` (the JSON keeps it whole)."""
    if not ts:
        return "-"
    return ts.replace("T", " ")[:16] + "Z" if len(ts) >= 16 and ts.endswith("Z") else ts
