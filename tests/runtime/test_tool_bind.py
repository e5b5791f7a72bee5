"""ToolSpec.bind: the fast path for plain signatures gives exactly what Signature.bind and
apply_defaults give, and every irregular call still raises the usual TypeError."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tachograph.capture.runtime import ToolSpec
from tachograph.record.event import Effect


def _spec(fn: Any) -> ToolSpec:
    return ToolSpec(name=fn.__name__, effect=Effect.PURE, fn=fn, signature=inspect.signature(fn))


def plain(a: Any, b: Any = 2, c: Any = "x", idempotency_key: str | None = None) -> None:
    pass


def odd(a: Any, *rest: Any, k: Any = 1, **more: Any) -> None:
    pass


def simple(a: Any, b: Any = 2) -> None:  # no key parameter
    pass


def _reference(spec: ToolSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        bound = spec.signature.bind(*args, **kwargs)
    except TypeError:
        return TypeError
    bound.apply_defaults()
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if name == "idempotency_key":
            continue
        kind = spec.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            value = list(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
            continue
        out[name] = value
    return out


def _bound(spec: ToolSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return spec.bind(args, kwargs)
    except TypeError as exc:
        message = str(exc)
    assert message.startswith(f"{spec.name}(): ")
    return TypeError


NAMES = st.sampled_from(["a", "b", "c", "idempotency_key", "zz"])


@given(
    args=st.lists(st.integers(), max_size=5).map(tuple),
    kwargs=st.dictionaries(NAMES, st.integers(), max_size=4),
)
def test_fast_bind_equals_signature_bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    for fn in (plain, odd, simple):
        spec = _spec(fn)
        got = _bound(spec, args, kwargs)
        want = _reference(spec, args, kwargs)
        assert got == want
        if isinstance(want, dict):
            assert list(got) == list(want)  # the same order: the key is derived from it


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {}), ((1, 2), {"b": 3}), ((1,), {"zz": 1}), ((1, 2, 3, 4, 5), {})],
)
def test_irregular_calls_raise_type_error(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match=r"^plain\(\): "):
        _spec(plain).bind(args, kwargs)
