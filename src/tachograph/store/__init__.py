"""Stores: the rows-only contract, the engines, opening one from a URL, and verifying one.

``open_store("scheme://...")`` finds the engine through the entry point group
``tachograph.stores`` (:mod:`tachograph.store.registry`); a plain path means SQLite.
:func:`verify_stored` and :func:`verify_all` hold a stored run's rows against its summary with
:func:`~tachograph.record.verify.verify_run`; the stores themselves know nothing of it.
"""

from __future__ import annotations

from ..record.rows import StoredRow
from .base import Receipt, RunInfo, Store
from .memory import MemoryStore
from .registry import DEFAULT_STORE, engines, open_store, store_url
from .sqlite import SQLiteStore
from .verify import read_verified, run_summary, verify_all, verify_stored

__all__ = [
    "DEFAULT_STORE",
    "MemoryStore",
    "Receipt",
    "RunInfo",
    "SQLiteStore",
    "Store",
    "StoredRow",
    "engines",
    "open_store",
    "read_verified",
    "run_summary",
    "store_url",
    "verify_all",
    "verify_stored",
]
