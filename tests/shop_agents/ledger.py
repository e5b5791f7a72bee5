"""A fake payments and notes API that keeps its books in its own SQLite file.

It counts every real call and deduplicates by idempotency key, like a real payments API does.
Keeping the books in a file lets a test see what a killed child process did to the world.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from typing import Any


class Ledger:
    """Counts calls per kind; applies each idempotency key at most once."""

    def __init__(self, path: str = ":memory:") -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode = WAL") if path != ":memory:" else None
        self._db.execute("CREATE TABLE IF NOT EXISTS calls (kind TEXT, key TEXT)")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS applied (key TEXT PRIMARY KEY, kind TEXT, result TEXT)"
        )

    def apply(self, kind: str, key: str | None, body: dict[str, Any]) -> dict[str, Any]:
        """One real call: applied once per key; a repeat returns the first result."""
        with self._lock:
            self._db.execute("INSERT INTO calls VALUES (?, ?)", (kind, key))
            if key is not None:
                row = self._db.execute("SELECT result FROM applied WHERE key=?", (key,)).fetchone()
                if row is not None:
                    return dict(json.loads(row[0]))
            count = self._db.execute(
                "SELECT count(*) FROM applied WHERE kind=?", (kind,)
            ).fetchone()[0]
            result = {"id": f"{kind}_{count + 1:04d}", **body, "status": "succeeded"}
            self._db.execute(
                "INSERT INTO applied VALUES (?, ?, ?)",
                (key if key is not None else f"nokey-{kind}-{count}", kind, json.dumps(result)),
            )
            return result

    def calls(self, kind: str | None = None) -> int:
        """How many real calls were made (of ``kind``)."""
        sql, args = "SELECT count(*) FROM calls", ()
        if kind is not None:
            sql, args = sql + " WHERE kind=?", (kind,)
        with self._lock:
            return int(self._db.execute(sql, args).fetchone()[0])

    def keys(self, kind: str) -> list[str | None]:
        """The idempotency keys the calls of ``kind`` carried, in order."""
        with self._lock:
            rows = self._db.execute("SELECT key FROM calls WHERE kind=? ORDER BY rowid", (kind,))
            return [r[0] for r in rows]

    def applied(self, kind: str) -> list[dict[str, Any]]:
        """The effects that took place, once each."""
        with self._lock:
            rows = self._db.execute(
                "SELECT result FROM applied WHERE kind=? ORDER BY rowid", (kind,)
            )
            return [json.loads(r[0]) for r in rows]

    def close(self) -> None:
        """Close the file."""
        self._db.close()
