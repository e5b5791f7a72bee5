"""Output a person enjoys reading: colour by event type on a terminal, plain text elsewhere.

Every text output goes through :class:`Output`: on a terminal it uses rich (colours, aligned
tables, pretty JSON, progress bars on stderr); when stdout is a pipe or a file it prints plain,
aligned text with no escape codes and no box drawing, so ``grep`` and ``diff`` work. rich's
usual switches apply: ``NO_COLOR`` turns colour off, ``FORCE_COLOR`` forces the terminal form.

rich is imported only when something is to be shown on a terminal (about 25 ms of a
command's start): a command whose output goes to a pipe, a file or ``--json``, with no
terminal for a progress bar, runs without it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any

import orjson

from ..record.event import Event, EventType
from ..views.text import escape, escape_json
from ..views.timeline import is_dry_run, short, summarize

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["Output", "event_style", "is_dry_run", "short", "summarize", "type_style"]

_TYPE_STYLES = {
    "run": "bold magenta",
    "model": "cyan",
    "tool": "yellow",
    "plan": "blue",
    # the undotted types are their own family
    EventType.DECISION.value: "blue",
    EventType.HANDOFF.value: "blue",
    "guardrail": "green",
    "output": "green",
    "clock": "dim",
    "random": "dim",
    "external": "dim",
}


def type_style(event_type: str) -> str:
    """The rich style for an event type: one colour per family, red for failures."""
    if event_type.endswith(".failed") or event_type == EventType.OUTPUT_REJECTED.value:
        return "bold red"
    return _TYPE_STYLES.get(event_type.split(".", 1)[0], "white")


def event_style(event: Event) -> str:
    """The style of one event's row (a tripped guardrail is red, not green)."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    if event.type == EventType.GUARDRAIL_TRIPWIRE.value and payload.get("blocked"):
        return "bold red"
    return type_style(event.type)


def _surely_not_a_terminal(stream: IO[str]) -> bool:
    """Whether rich's ``Console(file=stream).is_terminal`` is certainly ``False``, told
    without importing rich: no ``TTY_COMPATIBLE`` or ``FORCE_COLOR`` (which rich obeys
    first), and a stream that says it is no terminal. Anything else is for rich to decide."""
    if "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ:
        return False
    isatty = getattr(stream, "isatty", None)
    if isatty is None:
        return True  # rich: no isatty, no terminal
    try:
        return not isatty()
    except ValueError:
        return False  # a closed stream: rich decides (it says no terminal)


class Output:
    """Where a command writes: rich on a terminal, plain text otherwise."""

    def __init__(self) -> None:
        self.rich = not _surely_not_a_terminal(sys.stdout) and self.console.is_terminal

    @functools.cached_property
    def console(self) -> Console:
        """rich's console on stdout (rich is imported here, at the first use)."""
        from rich.console import Console

        return Console(highlight=False, soft_wrap=False)

    @functools.cached_property
    def err(self) -> Console:
        """rich's console on stderr (for progress bars)."""
        from rich.console import Console

        return Console(stderr=True, highlight=False)

    @property
    def err_is_terminal(self) -> bool:
        """Whether stderr is a terminal, as rich tells it (without rich when it is surely
        not)."""
        return not _surely_not_a_terminal(sys.stderr) and self.err.is_terminal

    def line(self, text: str = "", style: str | None = None) -> None:
        """Print one line (styled on a terminal); control and bidi characters are escaped."""
        text = escape(text)
        if self.rich:
            from rich.text import Text

            self.console.print(Text(text, style=style or ""))
        else:
            _write(text)

    def heading(self, text: str) -> None:
        """A section heading."""
        text = escape(text)
        if self.rich:
            from rich.text import Text

            self.console.rule(Text(text, style="bold"), align="left")
        else:
            _write(f"== {text}")

    def json(self, value: Any, *, indent: int = 0) -> None:
        """Pretty-print a JSON value, shifted right by ``indent`` spaces."""
        raw = escape_json(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())
        if self.rich:
            # Highlight the escaped text itself: rich.json.JSON would parse it again and print
            # the decoded strings, control characters included.
            from rich.highlighter import JSONHighlighter
            from rich.padding import Padding
            from rich.text import Text

            self.console.print(Padding(JSONHighlighter()(Text(raw)), (0, 0, 0, indent)))
        else:
            _write(textwrap.indent(raw, " " * indent))

    def table(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[str]],
        *,
        styles: Sequence[str | None] | None = None,
        cell_styles: Sequence[Sequence[str | None]] | None = None,
        keep: Sequence[str] = (),
    ) -> None:
        """An aligned table; ``styles`` per row, ``cell_styles`` per cell (terminal only).

        The columns named in ``keep`` (a seq, a type, a run id: what a person copies or looks
        up) are never cut on a narrow terminal; the other columns shorten with an ellipsis.
        Every cell is escaped (:func:`~tachograph.views.text.escape`).
        """
        rows = [[escape(cell) for cell in row] for row in rows]
        if self.rich:
            from rich import box
            from rich.table import Table
            from rich.text import Text

            table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
            natural = [max([len(h), *(len(row[c]) for row in rows)]) for c, h in enumerate(headers)]
            limits = _fit(natural, [h in keep for h in headers], self.console.width)
            for c, h in enumerate(headers):
                table.add_column(
                    h,
                    overflow="ellipsis",
                    no_wrap=True,
                    width=limits[c],
                    justify="right" if h in ("SEQ", "EVENTS") else "left",
                )
            for r, row in enumerate(rows):
                cells = []
                for c, value in enumerate(row):
                    style = cell_styles[r][c] if cell_styles else None
                    cells.append(Text(value, style=style or ""))
                table.add_row(*cells, style=styles[r] if styles else None)
            self.console.print(table)
            return
        widths = [len(h) for h in headers]
        for row in rows:
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], len(cell))
        for row in [list(headers), *rows]:
            padded = [c.ljust(widths[i]) for i, c in enumerate(row)]
            _write("  ".join(padded).rstrip())

    @contextlib.contextmanager
    def progress(self, total: int | None, description: str) -> Iterator[Callable[[int], None]]:
        """A progress bar on stderr while the block runs (only when stderr is a terminal)."""
        if not self.err_is_terminal:
            yield lambda _n: None
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        bar = Progress(
            # the description names a file or a run: untrusted text, no markup, escaped
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=self.err,
            transient=True,
        )
        with bar:
            task = bar.add_task(escape(description), total=total)
            yield lambda n: bar.advance(task, n)


def _fit(natural: Sequence[int], kept: Sequence[bool], total: int) -> list[int]:
    """Column widths for a table ``total`` characters wide.

    Kept columns get their natural width; the others share what remains in proportion to
    their natural widths (at least 3 characters each, for "x.." cut with an ellipsis). rich
    would otherwise shrink every column alike, a seq or a run id included.
    """
    gaps = 3 * len(natural)  # a column's padding and separator
    fixed = sum(w for w, k in zip(natural, kept, strict=True) if k)
    flexible = [w for w, k in zip(natural, kept, strict=True) if not k]
    room = max(total - gaps - fixed, 3 * len(flexible))
    want = sum(flexible)
    widths = []
    for width, is_kept in zip(natural, kept, strict=True):
        if is_kept or want <= room:
            widths.append(width)
        else:
            widths.append(max(3, min(width, room * width // want)))
    return widths


def _write(text: str) -> None:
    sys.stdout.write(text + "\n")
