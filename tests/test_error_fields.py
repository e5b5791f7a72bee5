"""Every attribute a raise passes is declared, with a type, on the error class it is passed to."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import tachograph
from tachograph import errors
from tachograph.errors import RunNotFound, StoreError, TachographError
from tachograph.store import MemoryStore
from tachograph.testing import build_run

SRC = Path(tachograph.__file__).resolve().parent
ERRORS = {name: getattr(errors, name) for name in errors.__all__}


@functools.cache
def _keywords_passed() -> dict[str, set[tuple[str, str]]]:
    """``{error class name: {(keyword, file)}}`` for every call of an error class in src."""
    found: dict[str, set[tuple[str, str]]] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in ERRORS:
                for keyword in node.keywords:
                    if keyword.arg is not None:
                        where = str(path.relative_to(SRC))
                        found.setdefault(name, set()).add((keyword.arg, where))
    return found


def _declared(cls: type) -> dict[str, str]:
    """The class's annotated attributes and their types (as written: annotations are lazy)."""
    hints: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if issubclass(klass, TachographError):
            hints.update(vars(klass).get("__annotations__", {}))
    return hints


def test_the_scan_finds_the_raises() -> None:
    found = _keywords_passed()
    assert ("suggestions", "store/base.py") in found["RunNotFound"]
    assert ("expected", "store/base.py") in found["SequenceConflict"]


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_every_keyword_passed_is_declared_with_a_type(name: str) -> None:
    passed = _keywords_passed().get(name, set())
    declared = _declared(ERRORS[name])
    missing = sorted({(kw, where) for kw, where in passed if kw not in declared})
    assert not missing, f"{name}: declare these attributes on the class: {missing}"
    for kw, _ in passed:
        assert declared[kw] not in ("", "Any") or kw in ("value", "actual", "expected"), (name, kw)


def test_declared_attributes_have_defaults_so_reading_one_never_fails() -> None:
    err = StoreError("x")
    assert (err.location, err.run_id) == (None, None)
    assert RunNotFound("x").suggestions == ()
    assert RunNotFound("x").tenants == ()


def test_a_run_looked_up_in_the_wrong_tenant_carries_the_right_ones() -> None:
    with MemoryStore() as store:
        store.append(build_run("run-a", 1, tenant="acme"))
        with pytest.raises(RunNotFound) as info:
            store.run_info("run-a", tenant="globex")
    err = info.value
    assert list(err.tenants) == ["acme"]
    assert err.location == "memory://"
    assert "it exists in tenant 'acme'" in str(err)
