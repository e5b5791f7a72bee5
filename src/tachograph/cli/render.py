"""Output a person enjoys reading: colour by event type on a terminal, plain text elsewhere.

Every text output goes through :class:`Output`: on a terminal it uses rich (colours, aligned
tables, pretty JSON, progress bars on stderr); when stdout is a pipe or a file it prints plain,
aligned text with no escape codes and no box drawing, so ``grep`` and ``diff`` work. rich's
usual switches apply: ``NO_COLOR`` turns colour off, ``FORCE_COLOR`` forces the terminal form.
"""

from __future__ import annotations

import contextlib
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import orjson
from rich import box
from rich.console import Console
from rich.highlighter import JSONHighlighter
from rich.padding import Padding
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from ..record.event import Event
from ..views.captured import NOT_CAPTURED, not_captured
from ..views.text import escape, escape_json

__all__ = ["Output", "event_style", "is_dry_run", "summarize", "type_style"]

_TYPE_STYLES = {
    "run": "bold magenta",
    "model": "cyan",
    "tool": "yellow",
    "plan": "blue",
    "decision": "blue",
    "handoff": "blue",
    "guardrail": "green",
    "output": "green",
    "clock": "dim",
    "random": "dim",
    "external": "dim",
}


def type_style(event_type: str) -> str:
    """The rich style for an event type: one colour per family, red for failures."""
    if event_type.endswith(".failed") or event_type == "output.rejected":
        return "bold red"
    return _TYPE_STYLES.get(event_type.split(".", 1)[0], "white")


def is_dry_run(event: Event) -> bool:
    """True for a simulated tool result, or a run started in dry-run mode."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    if event.type == "tool.completed":
        result = payload.get("result")
        return payload.get("dry_run") is True or (
            isinstance(result, dict) and result.get("dry_run") is True
        )
    if event.type == "run.started":
        labels = payload.get("labels")
        return isinstance(labels, dict) and labels.get("tachograph.dry_run") == "true"
    return False


def event_style(event: Event) -> str:
    """The style of one event's row (a tripped guardrail is red, not green)."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    if event.type == "guardrail.tripwire" and payload.get("blocked"):
        return "bold red"
    return type_style(event.type)


def short(value: Any, limit: int = 60) -> str:
    """A one-line rendering of a value, cut at ``limit`` characters."""
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _args(args: Any) -> str:
    if not isinstance(args, dict):
        return short(args, 50)
    inner = ", ".join(f"{k}={short(v, 30)}" for k, v in args.items())
    return short(inner, 60)


def _message(request: Any) -> str:
    messages = request.get("messages") if isinstance(request, dict) else None
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        last = messages[-1]
        return f"{last.get('role', '?')}: {short(last.get('content'), 50)}"
    return short(request, 60)


def _tokens(usage: Any) -> int | None:
    """Total tokens from a provider's usage block (OpenAI or Anthropic naming)."""
    if not isinstance(usage, dict):
        return None
    total = usage.get("total_tokens")
    if isinstance(total, int):
        return total
    parts = [
        usage.get(k)
        for k in ("input_tokens", "output_tokens", "prompt_tokens", "completion_tokens")
    ]
    counted = [v for v in parts if isinstance(v, int)]
    return sum(counted) if counted else None


def _blocks(blocks: list[Any]) -> str:
    """Anthropic content blocks or OpenAI Responses output items, in one line."""
    calls: list[str] = []
    texts: list[str] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind in ("tool_use", "function_call"):
            calls.append(str(block.get("name")))
        elif kind in ("text", "output_text"):
            texts.append(str(block.get("text", "")))
        elif kind == "message" and isinstance(block.get("content"), list):
            texts.append(_blocks(block["content"]))
    if calls:
        return "calls " + ", ".join(calls)
    return short(" ".join(texts), 60)


def _uncaptured_answer(response: Any) -> str:
    """An answer whose message was not captured: say so, with the finish reason if known."""
    text = f"message {NOT_CAPTURED}"
    choices = response.get("choices") if isinstance(response, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        reason = choices[0].get("finish_reason")
        if isinstance(reason, str):
            text += f" (finish {reason})"
    return text


def _answer(response: Any) -> str:
    """One line for a model answer: OpenAI chat, OpenAI responses, Anthropic, or HTTP-level."""
    if not isinstance(response, dict):
        return short(response, 60)
    if "status" in response and ("body" in response or "events" in response):
        # Recorded at the SDK's HTTP transport: the provider's JSON is the body.
        if "events" in response:
            return f"HTTP {response['status']}, a stream of {len(response['events'] or [])} events"
        return _answer(response.get("body"))
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict):
            calls = message.get("tool_calls")
            if isinstance(calls, list) and calls:
                names = [
                    str(c.get("name") or (c.get("function") or {}).get("name") or "?")
                    for c in calls
                    if isinstance(c, dict)
                ]
                return "calls " + ", ".join(names)
            return short(message.get("content"), 60)
    for key in ("content", "output"):
        if isinstance(response.get(key), list):
            return _blocks(response[key])
    if isinstance(response.get("content"), str):
        return short(response["content"], 60)
    return short(response, 60)


def summarize(event: Event) -> str:
    """A one-line summary of an event, for timelines."""
    if event.erased:
        return "(payload erased)"
    p = event.payload if isinstance(event.payload, dict) else {}
    t = event.type
    # What an imported trace did not capture is said as such, never shown as null or {}.
    missing = not_captured(p)
    if t == "run.started":
        value = NOT_CAPTURED if "input" in missing else short(p.get("input"), 50)
        text = f"input {value}"
        parent = p.get("parent")
        if isinstance(parent, dict):
            text += f"  (fork of {parent.get('run_id')} at seq {parent.get('seq')})"
        return text
    if t == "run.finished":
        if p.get("error"):
            err = p["error"]
            return f"{p.get('status')}: {err.get('type')}: {short(err.get('message'), 40)}"
        value = NOT_CAPTURED if "output" in missing else short(p.get("output"), 50)
        return f"{p.get('status')}: {value}"
    if t == "model.request":
        request = p.get("request")
        if "messages" in missing:
            model = request.get("model") if isinstance(request, dict) else None
            return f"{model or event.model or '?'}: messages {NOT_CAPTURED}"
        return _message(request)
    if t == "model.response":
        response = p.get("response")
        text = _uncaptured_answer(response) if "message" in missing else _answer(response)
        usage = p.get("usage")
        if usage is None and isinstance(response, dict):
            body = response.get("body")
            usage = response.get("usage") or (body.get("usage") if isinstance(body, dict) else None)
        tokens = _tokens(usage)
        if tokens is not None:
            text += f"  [{tokens} tokens]"
        return text
    if t == "model.failed" or t == "tool.failed":
        err = p.get("error") or {}
        prefix = f"{p['tool']}: " if t == "tool.failed" and "tool" in p else ""
        return f"{prefix}{err.get('type')}: {short(err.get('message'), 50)}"
    if t == "tool.requested":
        args = NOT_CAPTURED if "args" in missing else _args(p.get("args"))
        return f"{p.get('tool')}({args})  [{p.get('effect')}]"
    if t == "tool.completed":
        result = NOT_CAPTURED if "result" in missing else short(p.get("result"), 60)
        return f"{p.get('tool')} -> {result}"
    if t == "plan.selected":
        return f"{p.get('plan')}" + (f"  ({short(p['reason'], 50)})" if p.get("reason") else "")
    if t == "decision":
        return f"{p.get('name')} = {short(p.get('chosen'), 50)}"
    if t == "guardrail.tripwire":
        verdict = "BLOCKED" if p.get("blocked") else "passed"
        return f"{p.get('guardrail')} ({p.get('stage')}): {verdict}"
    if t in ("output.accepted", "output.rejected"):
        return f"by {p.get('by')}" + (f": {short(p['reason'], 50)}" if p.get("reason") else "")
    if t == "handoff":
        return f"{p.get('from')} -> {p.get('to')}"
    if t in ("clock.read", "random.value"):
        return short(p.get("value"), 60)
    if t == "random.seed":
        return f"seed {p.get('seed')} ({p.get('source')})"
    if t == "external.read":
        key = f"[{p['key']}]" if p.get("key") is not None else ""
        return f"{p.get('source')}{key} = {short(p.get('value'), 50)}"
    return short(p, 70)


class Output:
    """Where a command writes: rich on a terminal, plain text otherwise."""

    def __init__(self) -> None:
        self.console = Console(highlight=False, soft_wrap=False)
        self.err = Console(stderr=True, highlight=False)
        self.rich = self.console.is_terminal

    def line(self, text: str = "", style: str | None = None) -> None:
        """Print one line (styled on a terminal); control and bidi characters are escaped."""
        text = escape(text)
        if self.rich:
            self.console.print(Text(text, style=style or ""))
        else:
            _write(text)

    def heading(self, text: str) -> None:
        """A section heading."""
        text = escape(text)
        if self.rich:
            self.console.rule(Text(text, style="bold"), align="left")
        else:
            _write(f"== {text}")

    def json(self, value: Any, *, indent: int = 0) -> None:
        """Pretty-print a JSON value, shifted right by ``indent`` spaces."""
        raw = escape_json(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())
        if self.rich:
            # Highlight the escaped text itself: rich.json.JSON would parse it again and print
            # the decoded strings, control characters included.
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
        if not self.err.is_terminal:
            yield lambda _n: None
            return
        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=self.err,
            transient=True,
        )
        with bar:
            task = bar.add_task(description, total=total)
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
