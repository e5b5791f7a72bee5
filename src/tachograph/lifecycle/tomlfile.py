"""Reading policy files (TOML): ``tomllib`` from Python 3.11, ``tomli`` on 3.10."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ..errors import PolicyError

__all__ = ["load_toml", "parse_duration"]


def load_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The TOML document at ``path``; a missing, unreadable, non-UTF-8 or malformed file is a
    :class:`PolicyError`."""
    if sys.version_info >= (3, 11):
        import tomllib as toml
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as toml
    target = Path(path)
    try:
        with target.open("rb") as handle:
            data: dict[str, Any] = toml.load(handle)
    except OSError as exc:
        raise PolicyError(f"cannot read policy {target}: {exc.strerror}", path=str(target)) from exc
    except UnicodeDecodeError as exc:  # TOML is UTF-8; tomllib decodes before it parses
        raise PolicyError(
            f"policy {target} is not UTF-8 text (byte {exc.start}: {exc.reason})",
            path=str(target),
        ) from exc
    except toml.TOMLDecodeError as exc:
        raise PolicyError(f"policy {target} is not valid TOML: {exc}", path=str(target)) from exc
    return data


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(
    value: Any, *, key: str, path: str | None = None, label: str | None = None
) -> float:
    """A duration in seconds from ``"30d"``, ``"12h"``, ``"6w"``, ``"90m"``, ``"45s"`` or a number
    of days; ``"forever"`` is infinity. An error names the file (``path``) and ``label`` (the
    key as the file writes it; ``key`` when not given)."""
    where = f"{path}: {label or key}" if path else (label or key)
    if isinstance(value, bool):
        raise PolicyError(
            f"{where}: expected a duration such as '30d', not {value!r}", key=key, path=path
        )
    if isinstance(value, (int, float)):
        if value != value:  # NaN: every comparison with it is false, so no floor holds it
            raise PolicyError(f"{where}: nan is not a duration", key=key, path=path)
        if value < 0:
            raise PolicyError(f"{where}: a duration cannot be negative", key=key, path=path)
        return float(value) * 86400
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("forever", "never", "inf"):
            return float("inf")
        unit = _UNITS.get(text[-1:])
        if unit is not None:
            try:
                amount = float(text[:-1])
            except ValueError:
                amount = -1.0
            if amount >= 0:
                return amount * unit
    raise PolicyError(
        f"{where}: {value!r} is not a duration; write e.g. '30d', '12h', '6w' or 'forever'",
        key=key,
        path=path,
    )
