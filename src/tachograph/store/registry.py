"""Opening a store from a URL: ``scheme://...`` names the engine, a plain path means SQLite.

Engines are found through the entry point group ``tachograph.stores``: each entry maps a URL
scheme to a :class:`~tachograph.store.base.Store` subclass whose ``from_url`` opens it. An
engine in another package is one module and one line of its ``pyproject.toml``::

    [project.entry-points."tachograph.stores"]
    postgresql = "tachograph.store.postgres:PostgresStore"

The built-in schemes (``sqlite``, ``memory``) are declared the same way, but are resolved
without reading the installed packages' metadata, which would cost every command's start.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
from pathlib import Path

from ..errors import StoreError
from .base import Store

__all__ = ["DEFAULT_STORE", "ENTRY_POINT_GROUP", "engine", "engines", "open_store", "store_url"]

ENTRY_POINT_GROUP = "tachograph.stores"

DEFAULT_STORE = "sqlite:///.tachograph/tachograph.db"
"""Where runs go when nothing else is said: ``./.tachograph/tachograph.db``."""

_BUILTIN = {
    "memory": "tachograph.store.memory:MemoryStore",
    "sqlite": "tachograph.store.sqlite:SQLiteStore",
}
_EXAMPLES = {"memory": "memory:// or memory://NAME", "sqlite": "sqlite:///path.db"}
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def store_url(url: str | os.PathLike[str] | None = None) -> str:
    """The store URL in force: the argument, else ``TACHOGRAPH_STORE``, else the default."""
    if url is not None:
        return str(url)
    return os.environ.get("TACHOGRAPH_STORE") or DEFAULT_STORE


@functools.lru_cache(maxsize=1)
def _installed() -> dict[str, str]:
    from importlib.metadata import entry_points

    found: dict[str, str] = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(point.name.lower(), point.value)
    return found


def engines(*, refresh: bool = False) -> dict[str, str]:
    """Every known scheme and the ``module:Class`` that opens it, sorted by scheme.

    Installed entry points are read once per process; ``refresh=True`` reads them again (after
    installing a package, or putting one on ``sys.path``).
    """
    if refresh:
        _installed.cache_clear()
    return dict(sorted({**_installed(), **_BUILTIN}.items()))


def engine(scheme: str) -> type[Store]:
    """The store class registered for ``scheme``; :class:`StoreError` listing the known ones
    if there is none, or if it cannot be loaded."""
    key = scheme.lower()
    target = _BUILTIN.get(key) or _installed().get(key)
    if target is None:
        known = ", ".join(_EXAMPLES.get(name, f"{name}://...") for name in engines())
        raise StoreError(
            f"unknown store URL scheme {scheme!r}; known schemes: {known} (or a plain file "
            f"path for SQLite). An engine joins through the entry point group "
            f"{ENTRY_POINT_GROUP!r}",
            location=f"{scheme}://",
        )
    module_name, _, attr = target.partition(":")
    try:
        found: object = importlib.import_module(module_name)
        for part in attr.split(".") if attr else ():
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise StoreError(
            f"the store engine for {key}:// ({target}) cannot be loaded: {exc}",
            location=f"{key}://",
        ) from exc
    if not (isinstance(found, type) and issubclass(found, Store)):
        raise StoreError(
            f"the store engine for {key}:// ({target}) is not a tachograph Store class",
            location=f"{key}://",
        )
    return found


def open_store(url: str | os.PathLike[str] | Store | None = None, *, create: bool = True) -> Store:
    """Open a store by URL (``sqlite:///path.db``, ``memory://``, any registered scheme, a
    plain file path for SQLite, or ``None`` for the store in force, see :func:`store_url`).

    With ``create=False`` a store that does not exist raises
    :class:`~tachograph.errors.StoreNotFound` saying where it looked. A :class:`Store` is
    returned as it is.
    """
    if isinstance(url, Store):
        return url
    target = store_url(url)
    if isinstance(url, Path) or "://" not in target:
        from .sqlite import SQLiteStore

        return SQLiteStore(target, create=create)
    scheme = target.split("://", 1)[0]
    if not _SCHEME.fullmatch(scheme):
        raise StoreError(f"{target!r} is neither a store URL nor a file path", location=target)
    return engine(scheme).from_url(target, create=create)
