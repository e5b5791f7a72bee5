"""Run today's tests against the pre-hardening layout: new module paths as aliases only."""
import sys
import types

try:
    import tachograph
    import tachograph.events as _events
    import tachograph.jsonl as _jsonl

    if "tachograph.record" not in sys.modules:
        record = types.ModuleType("tachograph.record")
        record.__path__ = []  # a package
        record.jsonl = _jsonl
        record.event = _events
        sys.modules["tachograph.record"] = record
        sys.modules["tachograph.record.jsonl"] = _jsonl
        sys.modules["tachograph.record.event"] = _events
        tachograph.record = record
except Exception as exc:  # pragma: no cover
    print("shim failed:", exc, file=sys.stderr)
