"""Canonical bytes: RFC 8785 (JCS) for the closed value profile of SPEC section 2.

Two encoders produce the same bytes:

* the **fast path** hands the value to orjson with sorted keys. orjson's output is already JCS
  for everything in the profile except some floats and a rare key order. A single scan of the
  value, with orjson's own refusals of non-string keys, integers beyond 2^53 and lone
  surrogates, validates the profile and tells whether one of those cases is present; if so,
  a second pass copies the value with the difference removed before orjson sees it:

  - an integral float below 2^53 in magnitude becomes the int of the same value (orjson
    prints ``25.0``, JCS ``25``; the int prints ``25``, and ``-0.0`` becomes ``0`` as JCS says);
    when the only such floats are below 1e16 and no string holds what looks like one, the
    copy is skipped: the ``.0`` of each is dropped from orjson's output (see ``canonical``);
  - a float that orjson prints in another notation (nonzero magnitudes below 1e-5, integral
    floats from 2^53 up) becomes an ``orjson.Fragment`` of its ECMAScript form;
  - ordering keys by UTF-16 code units differs from orjson's code-point order only between a
    character of U+E000..U+FFFF and one above U+FFFF. When the output holds both kinds (a
    test of its bytes, no scan of the keys), every object is rebuilt in UTF-16 order and
    orjson keeps that order instead of sorting.

* the **exact path** is a small, direct transcription of RFC 8785 (ECMAScript number
  formatting, UTF-16 key order): the reference that the fast path is tested against.

The test suite proves both byte-identical to the reference vectors and to the ``rfc8785``
package over generated values.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import orjson

from ..errors import ProfileError
from .compiled import NATIVE

__all__ = [
    "COMPILED",
    "MAX_DEPTH",
    "MAX_SAFE_INTEGER",
    "canonical",
    "canonical_exact",
    "check_profile",
    "es6_number",
    "loads",
    "loads_strict",
    "loads_untrusted",
    "nesting_depth",
    "use_compiled",
]

MAX_SAFE_INTEGER = 2**53 - 1
"""Largest integer magnitude admitted in a record (SPEC section 2)."""

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects admitted in a record."""

# The scan adds up what it finds, in three fields of one integer:
_INTEGRAL = 1  # integral floats below 1e16 (not -0.0): orjson prints "25.0", JCS "25"
_OTHER = 1 << 40  # other floats orjson prints in another notation (1e-7, 1e+16, -0.0)
_INF = math.inf
# orjson refuses object keys that are not exactly ``str`` and lone surrogates under any
# options, and under OPT_STRICT_INTEGER integers beyond ±(2^53 - 1): the scan leaves those to it.
_STRICT = orjson.OPT_STRICT_INTEGER
_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
# UTF-8 lead bytes of U+E000..U+FFFF and of U+10000 and above: ordering keys by UTF-16 code
# units differs from orjson's code-point order only between two such characters.
_SUPPLEMENTARY = re.compile(rb"[\xf0-\xf4]")
# The ".0" orjson prints after an integral float, where the number ends: one pass over the
# bytes (three ``bytes.replace`` passes cost twice as much on a 1.6 KB payload).
_DOT_ZERO_BEFORE_END = re.compile(rb"\.0(?=[,\]}])")


class _Reject(Exception):
    """Internal: the fast scan found a problem; the slow locator names it."""


def _scan(value: Any, depth: int) -> int:
    # Only values are looked at. Keys, integers and strings are left to orjson (see _STRICT):
    # its refusal sends ``canonical`` to ``_fail``, which names the value, as a rejection here
    # does. The scan finds what orjson would print but the profile refuses (tuples, subclasses,
    # other types, NaN and the infinities, nesting past MAX_DEPTH) and counts the floats
    # orjson prints unlike JCS.
    t = type(value)
    if t is dict or t is list:
        if depth > MAX_DEPTH:
            raise _Reject
        flags = 0
        for item in value.values() if t is dict else value:
            it = type(item)
            if it is str or it is int or it is bool or item is None:
                continue
            flags += _scan(item, depth + 1)
        return flags
    if t is str or t is int or t is bool or value is None:
        return 0
    if t is float:
        if value != value or value == _INF or value == -_INF:
            raise _Reject
        # orjson prints integral floats with ".0", from 1e16 with an exponent, and magnitudes
        # below 1e-5 with an exponent where ECMAScript uses fixed notation down to 1e-6.
        if value.is_integer():
            if value == 0.0:
                return _INTEGRAL if math.copysign(1.0, value) > 0 else _OTHER
            return _INTEGRAL if -1e16 < value < 1e16 else _OTHER
        return _OTHER if -1e-5 < value < 1e-5 else 0
    raise _Reject


def _drop_dot_zero_py(data: bytes, count: int) -> bytes | None:
    """``data`` without the ".0" before each "," "]" or "}", if there are exactly ``count``."""
    dropped, found = _DOT_ZERO_BEFORE_END.subn(b"", data)
    return dropped if found == count else None


# The compiled scan (``native.c``, built with the package where a C compiler is at hand, see
# ``compiled.py``) gives the same answers as ``_scan`` and ``_drop_dot_zero_py`` at a fraction
# of their cost: it raises ValueError where ``_scan`` raises ``_Reject``. Without it, the
# Python walk serves.
_compiled: ModuleType | None = NATIVE

COMPILED: bool = _compiled is not None
"""Whether the compiled scan is built and wanted (``TACHOGRAPH_PURE_PYTHON`` unset); it is
used unless :func:`use_compiled` turned it off."""


_scan_py: Callable[[Any], int] = functools.partial(_scan, depth=1)


_profile_flags: Callable[[Any], int] = _compiled.scan if _compiled else _scan_py
_drop_dot_zero: Callable[[bytes, int], bytes | None] = (
    _compiled.drop_dot_zero if _compiled else _drop_dot_zero_py
)


def use_compiled(enabled: bool) -> bool:
    """Use the compiled scan (``True``, when it is built) or the Python walk (``False``);
    returns whether the compiled scan is now in use. For tests and benchmarks, which hold the
    two to the same bytes."""
    global _profile_flags, _drop_dot_zero
    if enabled and _compiled is not None:
        _profile_flags, _drop_dot_zero = _compiled.scan, _compiled.drop_dot_zero
        return True
    _profile_flags, _drop_dot_zero = _scan_py, _drop_dot_zero_py
    return False


def _describe(value: Any) -> str:
    t = type(value)
    if t.__module__ == "builtins":
        return t.__qualname__
    return f"{t.__module__}.{t.__qualname__}"


def _join(path: str, key: str) -> str:
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _locate(value: Any, path: str, depth: int) -> ProfileError | None:
    """Walk slowly and return an error naming the first bad value, or None if all is well."""
    t = type(value)
    if t is dict or t is list:
        if depth > MAX_DEPTH:
            return ProfileError(
                f"{path}: nesting deeper than {MAX_DEPTH} levels is not allowed",
                path=path,
                reason="depth",
            )
        if t is dict:
            for key, item in value.items():
                if type(key) is not str:
                    where = f"{path}[{key!r}]"
                    return ProfileError(
                        f"{where}: object key {key!r} ({_describe(key)}) is not a string",
                        path=where,
                        reason="key",
                    )
                bad = _check_string(key, _join(path, key), what="object key")
                if bad is not None:
                    return bad
                bad = _locate(item, _join(path, key), depth + 1)
                if bad is not None:
                    return bad
        else:
            for index, item in enumerate(value):
                bad = _locate(item, f"{path}[{index}]", depth + 1)
                if bad is not None:
                    return bad
        return None
    if t is str:
        return _check_string(value, path, what="string")
    if t is bool or value is None:
        return None
    if t is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return None
        return ProfileError(
            f"{path}: integer {value} is outside the safe range ±(2**53 - 1); "
            "record it as a string",
            path=path,
            reason="integer",
        )
    if t is float:
        if math.isfinite(value):
            return None
        return ProfileError(
            f"{path}: {value!r} is not allowed (finite floats only)", path=path, reason="float"
        )
    hint = "convert it first"
    if t is tuple:
        hint = "convert it to a list first"
    elif isinstance(value, (str, int, float)):
        hint = f"convert it to a plain {type(value).__mro__[1].__name__} first"
    return ProfileError(
        f"{path}: {_describe(value)} is not a JSON value; {hint}", path=path, reason="type"
    )


def _check_string(value: str, path: str, *, what: str) -> ProfileError | None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(value[exc.start])
        return ProfileError(
            f"{path}: {what} contains a lone surrogate U+{code:04X}", path=path, reason="surrogate"
        )
    return None


def _fail(value: Any, path: str) -> ProfileError:
    error = _locate(value, path, 1)
    if error is None:  # pragma: no cover - the scan and the locator disagree: a bug
        error = ProfileError(f"{path}: value is outside the JSON profile", path=path)
    return error


def check_profile(value: Any, path: str = "value") -> None:
    """Raise :class:`ProfileError` naming the first value outside the profile, if any."""
    error = _locate(value, path, 1)
    if error is not None:
        raise error


def canonical(value: Any, path: str = "value") -> bytes:
    """Return ``JCS(value)`` as UTF-8 bytes, or raise :class:`ProfileError` naming ``path``."""
    try:
        flags = _profile_flags(value)
    except (_Reject, ValueError, RecursionError):
        raise _fail(value, path) from None
    try:
        if not flags:
            out = orjson.dumps(value, option=_SORTED)
        elif flags < _OTHER:
            # Only integral floats below 1e16: orjson prints each as its digits, then ".0",
            # then "," "]" or "}". If the output holds exactly as many of those three-byte
            # sequences as there are such floats, none is inside a string, and dropping the
            # ".0" of each gives the JCS bytes, with no copy of the value.
            dropped = _drop_dot_zero(orjson.dumps(value, option=_SORTED), flags)
            out = dropped if dropped is not None else orjson.dumps(_rewrite(value), option=_SORTED)
        else:
            out = orjson.dumps(_rewrite(value), option=_SORTED)
        if not out.isascii() and (b"\xee" in out or b"\xef" in out) and _SUPPLEMENTARY.search(out):
            # characters of both kinds somewhere (keys or strings): sort every object by
            # UTF-16 code units ourselves and let orjson keep that order
            out = orjson.dumps(_rewrite_sorted(value), option=_STRICT)
        return out
    except (orjson.JSONEncodeError, TypeError):
        raise _fail(value, path) from None


def _float(value: float) -> Any:
    if -9007199254740992.0 < value < 9007199254740992.0:
        if value.is_integer():
            return int(value)  # exact below 2^53, and JCS prints the double as this integer
        if -1e-5 < value < 1e-5:
            return orjson.Fragment(es6_number(value).encode())
        return value
    # from 2^53 up every double is integral: ECMAScript pads the shortest digits with zeros
    return orjson.Fragment(es6_number(value).encode())


def _rewrite(value: Any) -> Any:
    """A copy of a scanned value with every float in the form orjson prints as JCS does."""
    t = type(value)
    if t is dict:
        return {k: _rewrite(v) for k, v in value.items()}
    if t is list:
        return [_rewrite(v) for v in value]
    if t is float:
        return _float(value)
    return value


def _rewrite_sorted(value: Any) -> Any:
    """As :func:`_rewrite`, with every object's keys in UTF-16 code-unit order."""
    t = type(value)
    if t is dict:
        return {k: _rewrite_sorted(v) for k, v in sorted(value.items(), key=_utf16_key)}
    if t is list:
        return [_rewrite_sorted(v) for v in value]
    if t is float:
        return _float(value)
    return value


# -- the exact path ---------------------------------------------------------------------------


def es6_number(value: float) -> str:
    """Format a finite double as ECMAScript's ``Number.prototype.toString`` does.

    RFC 8785 section 3.2.2.3: shortest round-trip digits, fixed notation from 1e-6 to 1e21.
    """
    if value == 0:
        return "0"
    if value != value or value in (_INF, -_INF):
        raise ValueError(f"{value!r} has no JSON form")
    sign = "-" if value < 0 else ""
    text = repr(abs(value))  # shortest round-trip digits, as ECMAScript requires
    mantissa, _, exp = text.partition("e")
    intpart, _, frac = mantissa.partition(".")
    digits = intpart + frac
    point = len(intpart) + (int(exp) if exp else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k, n = len(digits), point
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        out = (
            digits[0]
            + ("." + digits[1:] if k > 1 else "")
            + ("e+" if e >= 0 else "e-")
            + str(abs(e))
        )
    return sign + out


def _utf16_key(item: tuple[str, Any]) -> bytes:
    return item[0].encode("utf-16-be")


def _exact(value: Any, out: list[str]) -> None:
    t = type(value)
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif t is str:
        out.append(json.dumps(value, ensure_ascii=False))
    elif t is int:
        out.append(str(value))
    elif t is float:
        out.append(es6_number(value))
    elif t is list:
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _exact(item, out)
        out.append("]")
    elif t is dict:
        out.append("{")
        for i, (key, item) in enumerate(sorted(value.items(), key=_utf16_key)):
            if i:
                out.append(",")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _exact(item, out)
        out.append("}")
    else:  # pragma: no cover - callers validate first
        raise _Reject


def canonical_exact(value: Any, path: str = "value") -> bytes:
    """The reference encoder: slow, direct RFC 8785. Validates the profile first."""
    check_profile(value, path)
    out: list[str] = []
    _exact(value, out)
    return "".join(out).encode("utf-8")


# -- reading ----------------------------------------------------------------------------------

# Every ASCII digit mapped to "0": a run of 16 digits is then one substring search, some ten
# times faster than the pattern ``\d{16}`` over the same bytes.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_SIXTEEN_DIGITS = b"0" * 16


def _has_long_digits(raw: bytes) -> bool:
    """True if ``raw`` holds 16 ASCII digits in a row (an integer that may exceed 2^53)."""
    return _SIXTEEN_DIGITS in raw.translate(_DIGITS_AS_ZERO)


def _widen(value: Any) -> Any:
    """Turn integers beyond ±(2^53 - 1) into the double of the same value (SPEC section 2)."""
    t = type(value)
    if t is int:
        return float(value) if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else value
    if t is dict:
        return {k: _widen(v) for k, v in value.items()}
    if t is list:
        return [_widen(v) for v in value]
    return value


def loads(data: bytes | str) -> Any:
    """Parse trusted JSON (our own stored bytes) quickly; large integers become doubles."""
    value = orjson.loads(data)
    raw = data.encode() if isinstance(data, str) else data
    if _has_long_digits(raw):
        value = _widen(value)
    return value


class DuplicateKeyError(ValueError):
    """A JSON object with the same key twice."""

    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKeyError(key)
        result[key] = value
    return result


def _parse_int(text: str) -> int | float:
    number = int(text)
    return float(number) if not -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER else number


def loads_strict(data: str | bytes) -> Any:
    """Parse untrusted JSON: duplicate keys raise :class:`DuplicateKeyError`.

    ``NaN`` and ``Infinity`` literals parse, so that the profile check can name them; large
    integers become doubles, as SPEC section 2 prescribes.
    """
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    return json.loads(data, object_pairs_hook=_pairs, parse_int=_parse_int)


def nesting_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deeply arrays and objects nest in ``value``, counted without recursion (so that a
    hostile document cannot raise :class:`RecursionError`); stops counting past ``limit``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        t = type(item)
        if t is dict or t is list:
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
            stack.extend((child, depth) for child in (item.values() if t is dict else item))
    return deepest


def loads_untrusted(data: bytes | str, *, location: str) -> Any:
    """Parse a JSON document from outside (an OTLP file, a corpus sidecar): invalid UTF-8,
    lone surrogates, bad JSON and nesting deeper than 64 levels (SPEC section 2) raise
    :class:`~tachograph.errors.FormatError` naming ``location``, never anything else."""
    from ..errors import FormatError

    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise FormatError(f"{location}: not valid JSON: {exc}", location=location) from None
    if nesting_depth(value) > MAX_DEPTH:
        raise FormatError(
            f"{location}: nested deeper than {MAX_DEPTH} levels (SPEC section 2)",
            location=location,
        )
    return value
