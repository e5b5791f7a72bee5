"""Event types are named through ``EventType`` rather than string literals, module by module
(the capture boundary and the write pipeline so far), and ``EventType`` names every type of
SPEC section 6."""

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
CONVERTED = sorted([*(SRC / "capture").glob("*.py"), SRC / "record" / "seal.py"])


def test_event_type_names_every_type_of_the_spec() -> None:
    assert {t.value for t in EventType} == SPEC_TYPES
    assert EventType("guardrail.passed") is EventType.GUARDRAIL_PASSED
    assert f"{EventType.GUARDRAIL_PASSED}" == "guardrail.passed"


def _literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(c) for c in ast.walk(node))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))  # docstrings
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            skip.update(id(c) for c in ast.walk(node))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in SPEC_TYPES
        and id(node) not in skip
    ]


@pytest.mark.parametrize("path", CONVERTED, ids=lambda p: str(p.relative_to(SRC)))
def test_no_event_type_literals(path: Path) -> None:
    assert _literals(path) == []
