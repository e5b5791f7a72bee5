"""Event types are named through ``EventType`` rather than string literals in every module of
the package, and ``EventType`` names every type of SPEC section 6.

A literal is any string constant equal to a SPEC type, outside docstrings, f-strings (prose)
and ``__all__`` (``handoff`` is also a function). A new one fails here: write
``EventType.X.value`` (or bind it once in a module constant where it is read per event)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tachograph import EventType

SRC = Path(__file__).resolve().parents[1] / "src" / "tachograph"
SPEC_TYPES = {
    "run.started", "run.finished", "model.request", "model.response", "model.failed",
    "tool.requested", "tool.completed", "tool.failed", "plan.selected", "guardrail.tripwire",
    "guardrail.passed", "output.accepted", "output.rejected", "handoff", "decision",
    "clock.read", "random.seed", "random.value", "external.read",
}  # fmt: skip
MODULES = sorted(SRC.rglob("*.py"))
# The only places where a type may be spelled out, as (module, class) -> why. No module is
# exempt as a whole.
EXEMPT_CLASSES = {
    ("record/event.py", "EventType"): "the definition: its member values are the types",
}


def test_event_type_names_every_type_of_the_spec() -> None:
    assert {t.value for t in EventType} == SPEC_TYPES
    assert EventType("guardrail.passed") is EventType.GUARDRAIL_PASSED
    assert f"{EventType.GUARDRAIL_PASSED}" == "guardrail.passed"
    # What the modules write is the plain value: JSON, repr, SQL parameters are unchanged.
    assert type(EventType.RUN_STARTED.value) is str
    assert repr(EventType.RUN_STARTED.value) == "'run.started'"


def _literals(path: Path) -> list[tuple[int, str]]:
    return _literals_at(path, path.relative_to(SRC).as_posix())


def _literals_at(path: Path, where: str) -> list[tuple[int, str]]:
    """``(line, type)`` of each event-type literal in ``path``, read as module ``where``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and (where, node.name) in EXEMPT_CLASSES:
            skip.update(id(c) for c in ast.walk(node))
        if isinstance(node, ast.JoinedStr):
            skip.update(id(c) for c in ast.walk(node))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))  # docstrings
        # names, not event types: ``__all__`` and the facade's table of lazy names (the
        # function ``tachograph.handoff`` is spelled as the event type it records)
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id in ("__all__", "_LAZY") for t in targets):
            skip.update(id(c) for c in ast.walk(node))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in SPEC_TYPES
        and id(node) not in skip
    ]


def test_the_scan_covers_the_package_and_finds_literals(tmp_path: Path) -> None:
    assert len(MODULES) > 100
    assert {p.relative_to(SRC).parts[0] for p in MODULES} >= {"cli", "replay", "store", "otel"}
    for (module, name), _why in EXEMPT_CLASSES.items():
        tree = ast.parse((SRC / module).read_text(encoding="utf-8"))
        assert any(isinstance(n, ast.ClassDef) and n.name == name for n in ast.walk(tree))
    # The exempt class holds the literals; outside it the scanner would report them.
    definition = (SRC / "record" / "event.py").read_text(encoding="utf-8")
    copy = tmp_path / "event.py"
    copy.write_text(definition.replace("class EventType(", "class Renamed("), encoding="utf-8")
    assert {v for _, v in _literals_at(copy, "record/event.py")} == SPEC_TYPES
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""run.started"""\n__all__ = ["handoff"]\nX = f"{1} tool.failed"\n'
        'if t == "tool.failed" or t in {"decision": 1}:\n    pass\n',
        encoding="utf-8",
    )
    assert sorted(_literals_at(probe, "probe.py")) == [(4, "decision"), (4, "tool.failed")]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_event_type_literals(path: Path) -> None:
    assert _literals(path) == []
