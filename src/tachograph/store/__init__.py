"""Stores: the contract, the engines, and opening one from a URL."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import StoreError
from .base import Receipt, RunInfo, Store
from .sqlite import SQLiteStore

__all__ = ["DEFAULT_STORE", "Receipt", "RunInfo", "SQLiteStore", "Store", "open_store", "store_url"]

DEFAULT_STORE = "sqlite:///.tachograph/tachograph.db"
"""Where runs go when nothing else is said: ``./.tachograph/tachograph.db``."""


def store_url(url: str | os.PathLike[str] | None = None) -> str:
    """The store URL in force: the argument, else ``TACHOGRAPH_STORE``, else the default."""
    if url is not None:
        return str(url)
    return os.environ.get("TACHOGRAPH_STORE") or DEFAULT_STORE


def open_store(url: str | os.PathLike[str] | Store | None = None, *, create: bool = True) -> Store:
    """Open a store by URL (``sqlite:///path.db``, a plain file path, ``postgresql://...``, or
    ``None`` for the default).

    With ``create=False`` a store that does not exist raises
    :class:`~tachograph.errors.StoreNotFound` saying where it looked.
    """
    if isinstance(url, Store):
        return url
    target = store_url(url)
    if isinstance(url, Path) or "://" not in target:
        return SQLiteStore(target, create=create)
    scheme = target.split("://", 1)[0]
    if scheme == "sqlite":
        return SQLiteStore.from_url(target, create=create)
    if scheme in ("postgresql", "postgres"):
        # Imported here: psycopg is an optional extra, and importing tachograph never loads it.
        try:
            from .postgres import PostgresStore
        except ImportError as exc:
            raise StoreError(
                f"{scheme}:// stores need psycopg: pip install 'tachograph[postgres]' ({exc})",
                location=target,
            ) from exc
        return PostgresStore.from_url(target, create=create)
    raise StoreError(
        f"unknown store URL scheme {scheme!r} in {target!r}; supported: sqlite:///path.db, "
        "postgresql://user@host/db",
        location=target,
    )
