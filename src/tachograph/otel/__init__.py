"""The OpenTelemetry bridge (``pip install 'tachograph[otel]'``).

Traces answer "where and when", the decision log answers "why, and what exactly"; the bridge
emits both and links them: each span event names its event (run id, seq, event id, hash) and
each event records its span's trace and span ids.

* Live: :func:`instrument` attaches a :class:`TachographSpanObserver` to every run recorded
  from then on (span events, and the GenAI ``invoke_agent`` / ``chat`` / ``execute_tool``
  spans); :func:`uninstrument` detaches it.
* After the fact: :func:`export_run` turns a recorded run into spans with its recorded
  timestamps and ids and sends them over OTLP/HTTP (``tacho otel export``).
* Import: :func:`import_otlp` reads OTLP/JSON GenAI traces (current and older GenAI
  conventions, OpenInference, OpenLLMetry) and records them as tachograph runs
  (``tacho otel import``).

``import tachograph`` never imports OpenTelemetry, and neither does importing this package:
the bridge (and with it OpenTelemetry) loads when first used, so that a base install can still
import ``tachograph.otel.importer`` and gets a plain ImportError naming the extra otherwise.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..capture.recorder import add_observer, remove_observer

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from .bridge import TachographSpanObserver
    from .export import ExportResult
    from .importer import ImportedRun, ImportResult

_EXTRA = "pip install 'tachograph[otel]'"


def _bridge() -> Any:
    try:
        from . import bridge
    except ImportError as exc:
        if (exc.name or "").startswith("opentelemetry"):
            raise ImportError(
                f"tachograph.otel needs OpenTelemetry ({exc.name} is not installed): {_EXTRA}",
                name=exc.name,
            ) from exc
        raise
    return bridge


__all__ = [
    "ExportResult",
    "ImportResult",
    "ImportedRun",
    "TachographSpanObserver",
    "export_run",
    "import_otlp",
    "instrument",
    "uninstrument",
]

_lock = threading.Lock()
_installed: TachographSpanObserver | None = None


def instrument(
    tracer_provider: TracerProvider | None = None,
    *,
    genai_spans: bool = True,
    capture_content: bool | None = None,
    replayed: bool = False,
) -> TachographSpanObserver:
    """Trace every run recorded from now on in this process; returns the observer.

    ``tracer_provider`` defaults to the global one. ``genai_spans=False`` only adds span
    events to whatever span is current (the agent's own tracing). ``capture_content=None``
    follows ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``. ``replayed=True`` also
    emits the steps a fork serves from its parent run. Calling it again replaces the previous
    instrumentation.
    """
    global _installed
    observer: TachographSpanObserver = _bridge().TachographSpanObserver(
        tracer_provider,
        genai_spans=genai_spans,
        capture_content=capture_content,
        replayed=replayed,
    )
    with _lock:
        if _installed is not None:
            remove_observer(_installed)
        _installed = observer
        add_observer(observer)
    return observer


def uninstrument() -> None:
    """Stop tracing runs recorded from now on (runs already being recorded keep their spans)."""
    global _installed
    with _lock:
        if _installed is not None:
            remove_observer(_installed)
            _installed = None


def __getattr__(name: str) -> Any:
    # The bridge, export and import pull in OpenTelemetry and more; only when used.
    if name == "TachographSpanObserver":
        return _bridge().TachographSpanObserver
    if name in ("export_run", "ExportResult"):
        from . import export

        return getattr(export, name)
    if name in ("import_otlp", "ImportResult", "ImportedRun"):
        from . import importer

        return getattr(importer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
