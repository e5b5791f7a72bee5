"""What a record did not capture, for the views: "not captured" is neither empty nor null.

A run imported from a trace holds only what the trace captured. Each payload lists what is
missing in ``not_captured`` (see docs/otel.md): ``input`` (``run.started``), ``output``
(``run.finished``), ``messages`` and ``tools`` (the ``request`` of ``model.request``),
``message`` (the answer's message in ``model.response``), ``args`` (``tool.requested``) and
``result`` (``tool.completed``). A ``null`` result with ``"not_captured": ["result"]`` means
"not known", where a plain ``null`` means the tool returned nothing; the views must keep the
two apart, so they ask here instead of printing the stored placeholder.

Rich-free: used by the CLI's timeline and by any other renderer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..record.event import EventType

__all__ = ["NOT_CAPTURED", "display_payload", "not_captured"]

NOT_CAPTURED = "not captured"
"""How a view shows a value the record does not hold."""

# Field name -> where it sits in the payload: (event type, path of keys) for the fields that
# are top-level placeholders (dropped from a display) or absent inner keys.
_TOP_LEVEL = {
    (EventType.RUN_STARTED.value, "input"),
    (EventType.RUN_FINISHED.value, "output"),
    (EventType.TOOL_REQUESTED.value, "args"),
    (EventType.TOOL_COMPLETED.value, "result"),
}


def not_captured(payload: Any) -> tuple[str, ...]:
    """The fields a payload says were not captured (in the recorded order; none if it says
    nothing or is malformed)."""
    if not isinstance(payload, Mapping):
        return ()
    listed = payload.get("not_captured")
    if not isinstance(listed, list):
        return ()
    return tuple(str(name) for name in listed if isinstance(name, str))


def display_payload(event_type: str, payload: Any) -> tuple[Any, tuple[str, ...]]:
    """The payload to show, and the fields to show as :data:`NOT_CAPTURED` beside it.

    The placeholders standing for what was not captured (``"input": null``, ``"args": {}``,
    ``"result": null``, ...) and the ``not_captured`` list itself are left out of the shown
    payload, so that nothing uncaptured looks like a recorded ``null`` or ``{}``."""
    missing = not_captured(payload)
    if not missing or not isinstance(payload, Mapping):
        return payload, missing
    shown = {k: v for k, v in payload.items() if k != "not_captured"}
    for name in missing:
        if (event_type, name) in _TOP_LEVEL and shown.get(name) in (None, {}, [], ""):
            shown.pop(name, None)
    return shown, missing
