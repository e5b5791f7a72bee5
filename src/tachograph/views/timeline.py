"""What a timeline shows, without rich: the one-line summary of each event and the rows of
``tacho show`` and ``tacho runs``, for the CLI (and any other viewer) to render.

Nothing here formats for a terminal: cells are plain text (the renderer escapes them) and a
row says what it is (dry run, tampered) rather than how to colour it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from ..record.event import Event, EventType
from ..store.base import RunInfo
from .captured import NOT_CAPTURED, not_captured

__all__ = [
    "RunRow",
    "TimelineRow",
    "event_row",
    "is_dry_run",
    "run_rows",
    "short",
    "summarize",
    "time_of",
    "timeline_row",
    "timeline_rows",
]


def is_dry_run(event: Event) -> bool:
    """True for a simulated tool result, or a run started in dry-run mode."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    if event.type == EventType.TOOL_COMPLETED.value:
        result = payload.get("result")
        return payload.get("dry_run") is True or (
            isinstance(result, dict) and result.get("dry_run") is True
        )
    if event.type == EventType.RUN_STARTED.value:
        labels = payload.get("labels")
        return isinstance(labels, dict) and labels.get("tachograph.dry_run") == "true"
    return False


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
        role, content = last.get("role"), last.get("content")
        data = last.get("data")
        if role is None and isinstance(data, dict):  # LangChain's form: {"type", "data"}
            role, content = last.get("type"), data.get("content")
        return f"{role or '?'}: {short(content, 50)}"
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
    if t == EventType.RUN_STARTED.value:
        value = NOT_CAPTURED if "input" in missing else short(p.get("input"), 50)
        text = f"input {value}"
        parent = p.get("parent")
        if isinstance(parent, dict):
            text += f"  (fork of {parent.get('run_id')} at seq {parent.get('seq')})"
        return text
    if t == EventType.RUN_FINISHED.value:
        if p.get("error"):
            return f"{p.get('status')}: {_error(p['error'], 40)}"
        value = NOT_CAPTURED if "output" in missing else short(p.get("output"), 50)
        return f"{p.get('status')}: {value}"
    if t == EventType.MODEL_REQUEST.value:
        request = p.get("request")
        if "messages" in missing:
            model = request.get("model") if isinstance(request, dict) else None
            return f"{model or event.model or '?'}: messages {NOT_CAPTURED}"
        return _message(request)
    if t == EventType.MODEL_RESPONSE.value:
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
    if t == EventType.MODEL_FAILED.value or t == EventType.TOOL_FAILED.value:
        err = p.get("error") or {}
        prefix = f"{p['tool']}: " if t == EventType.TOOL_FAILED.value and "tool" in p else ""
        return f"{prefix}{_error(err, 50)}"
    if t == EventType.TOOL_REQUESTED.value:
        args = NOT_CAPTURED if "args" in missing else _args(p.get("args"))
        return f"{p.get('tool')}({args})  [{p.get('effect')}]"
    if t == EventType.TOOL_COMPLETED.value:
        result = NOT_CAPTURED if "result" in missing else short(p.get("result"), 60)
        return f"{p.get('tool')} -> {result}"
    if t == EventType.PLAN_SELECTED.value:
        return f"{p.get('plan')}" + (f"  ({short(p['reason'], 50)})" if p.get("reason") else "")
    if t == EventType.DECISION.value:
        return f"{p.get('name')} = {short(p.get('chosen'), 50)}"
    if t == EventType.GUARDRAIL_TRIPWIRE.value:
        # a tripwire fired: it stopped the step, or only flagged it
        verdict = "BLOCKED" if p.get("blocked") else "flagged"
        reason = f"  ({short(p['reason'], 50)})" if p.get("reason") else ""
        return f"{p.get('guardrail')} ({p.get('stage')}): {verdict}{reason}"
    if t == EventType.GUARDRAIL_PASSED.value:
        return f"{p.get('guardrail')} ({p.get('stage')}): passed"
    if t in (EventType.OUTPUT_ACCEPTED.value, EventType.OUTPUT_REJECTED.value):
        return f"by {p.get('by')}" + (f": {short(p['reason'], 50)}" if p.get("reason") else "")
    if t == EventType.HANDOFF.value:
        return f"{p.get('from')} -> {p.get('to')}"
    if t in (EventType.CLOCK_READ.value, EventType.RANDOM_VALUE.value):
        return short(p.get("value"), 60)
    if t == EventType.RANDOM_SEED.value:
        return f"seed {p.get('seed')} ({p.get('source')})"
    if t == EventType.EXTERNAL_READ.value:
        key = f"[{p['key']}]" if p.get("key") is not None else ""
        return f"{p.get('source')}{key} = {short(p.get('value'), 50)}"
    return short(p, 70)


def time_of(ts: str) -> str:
    """A record-format timestamp at millisecond precision, as a timeline reads best."""
    # ts is YYYY-MM-DDTHH:MM:SS.ffffffZ
    return ts[11:23] if len(ts) >= 23 else ts


def event_row(event: Event) -> dict[str, Any]:
    """One event of ``tacho show --json``."""
    return {
        "seq": event.seq,
        "ts": event.ts,
        "actor": event.actor,
        "type": event.type,
        "summary": summarize(event),
        "idempotency_key": event.idempotency_key,
        "model": event.model,
        "dry_run": is_dry_run(event),
        "erased": event.erased,
        # what an imported trace did not capture (not recorded as empty: see docs/otel.md)
        "not_captured": list(not_captured(event.payload)),
    }


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One line of a timeline: its cells and what it is."""

    seq: str
    time: str
    actor: str
    type: str
    summary: str
    """The one-line summary, marked ``DRY RUN`` and ``TAMPERED`` where that applies."""
    dry_run: bool
    tampered: bool

    def cells(self) -> tuple[str, str, str, str, str]:
        """SEQ, TIME, ACTOR, TYPE, SUMMARY."""
        return (self.seq, self.time, self.actor, self.type, self.summary)


def timeline_row(event: Event, tampered: bool = False) -> TimelineRow:
    """The row of one event of a timeline, marked ``TAMPERED`` when ``tampered``."""
    summary = summarize(event)
    dry = is_dry_run(event)
    if dry:
        summary = "DRY RUN  " + summary
    if tampered:
        summary = "TAMPERED  " + summary
    return TimelineRow(
        str(event.seq), time_of(event.ts), event.actor, event.type, summary, dry, tampered
    )


def timeline_rows(
    events: Iterable[Event], tampered: frozenset[int] = frozenset()
) -> list[TimelineRow]:
    """The rows of a run's timeline; the seqs in ``tampered`` are marked ``TAMPERED``."""
    return [timeline_row(event, event.seq in tampered) for event in events]


@dataclass(frozen=True, slots=True)
class RunRow:
    """One line of ``tacho runs``."""

    run_id: str
    actor: str
    started: str
    events: str
    status: str

    def cells(self) -> tuple[str, str, str, str, str]:
        """RUN, ACTOR, STARTED, EVENTS, STATUS."""
        return (self.run_id, self.actor, self.started, self.events, self.status)


def run_rows(runs: Iterable[RunInfo]) -> list[RunRow]:
    """The rows of a run listing, newest first as given."""
    return [
        RunRow(
            r.run_id,
            r.actor,
            r.started_at[:19].replace("T", " "),
            str(r.events),
            r.status or "unfinished",
        )
        for r in runs
    ]


def _error(err: Any, width: int) -> str:
    """``type: message`` of a recorded error; its type alone when it has no message (a
    cancellation: ``asyncio.exceptions.CancelledError``)."""
    if not isinstance(err, dict):
        return short(err, width)
    message = err.get("message")
    if message in (None, ""):
        return str(err.get("type"))
    return f"{err.get('type')}: {short(message, width)}"
