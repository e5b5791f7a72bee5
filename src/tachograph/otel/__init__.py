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

``import tachograph`` never imports OpenTelemetry; this package does.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..capture.recorder import add_observer, remove_observer

try:
    from .bridge import TachographSpanObserver
except ImportError as exc:  # pragma: no cover - only without the extra
    if (exc.name or "").startswith("opentelemetry"):
        raise ImportError(
            "tachograph.otel needs OpenTelemetry: pip install 'tachograph[otel]'", name=exc.name
        ) from exc
    raise

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from .export import ExportResult
    from .importer import ImportedRun, ImportResult

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
    observer = TachographSpanObserver(
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
    # export and import pull in the OTLP exporter and more; only when used.
    if name in ("export_run", "ExportResult"):
        from . import export

        return getattr(export, name)
    if name in ("import_otlp", "ImportResult", "ImportedRun"):
        from . import importer

        return getattr(importer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
