"""The ``tacho`` command line (needs click and rich, imported only here).

``tacho = "tachograph.cli:main"``. The root group and its conventions are in :mod:`.app`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence

__all__ = ["is_sqlite_file", "main", "verify_workers"]


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``tacho`` with ``argv`` (default: the process arguments)."""
    workers = verify_workers(sys.argv[1:] if argv is None else argv)
    if workers < 2:
        from .app import main as run

        run(argv)
        return
    # ``tacho verify --workers N`` over a store's runs: its N - 1 worker processes start now,
    # and import the library (about a tenth of a second) while this process imports the
    # command line, parses the options and opens the store. The verification takes them;
    # whatever it did not take is ended.
    from ..store.parallel import prestart, stop_prestarted

    # Only ahead of time: if they cannot start now, the verification starts its own, or says
    # why it cannot.
    with contextlib.suppress(Exception):
        prestart(workers)
    try:
        from .app import main as run

        run(argv)
    finally:
        stop_prestarted()


_VALUED = ("--key", "--witness", "--witness-key", "--min-witnesses", "--workers")
"""The options of ``tacho verify`` that take a value."""


def verify_workers(argv: Sequence[str]) -> int:
    """The workers to start ahead for a command line: its ``--workers N`` if it is ``tacho
    [--store URL] verify [--all | STORE_FILE] ... --workers N`` over a SQLite store's runs,
    read before click parses it; 1 for any other command line, for one click would reject
    or answer with help, and for a verification that would not use them (one run: only a
    long one is cut in chunks, and there the start is lost in the work; a JSONL file; an
    evidence folder; a store other than SQLite).

    An estimate that only decides whether to start workers early: the command still parses
    its own options, and workers it did not take are ended when it ends."""
    args = list(argv)
    store = os.environ.get("TACHOGRAPH_STORE")
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] == "--store" and i + 1 < len(args):
            store = args[i + 1]
            i += 2
        elif args[i].startswith("--store="):
            store = args[i].removeprefix("--store=")
            i += 1
        else:
            return 1  # --help, --version or an option click will refuse
    if i >= len(args) or args[i] != "verify":
        return 1
    workers = 1
    target: str | None = None
    rest = args[i + 1 :]
    j = 0
    while j < len(rest):
        arg = rest[j]
        if arg in ("-h", "--help"):
            return 1
        if arg == "--":
            if target is None and j + 1 < len(rest):
                target = rest[j + 1]
            break
        if arg in _VALUED:
            if j + 1 >= len(rest):
                return 1
            if arg == "--workers":
                workers = _count(rest[j + 1])
            j += 2
            continue
        if arg.startswith("--workers="):
            workers = _count(arg.removeprefix("--workers="))
        elif not arg.startswith("-") and target is None:
            target = arg
        j += 1
    if workers < 2:
        return 1
    if target is None:
        if store is not None and "://" in store and not store.startswith("sqlite:"):
            return 1  # another engine: verified in this process
        return workers
    return workers if is_sqlite_file(target) else 1


def _count(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return 1


def is_sqlite_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a SQLite file (``tacho verify store.db``): a store is recognised
    by its content (the SQLite header), not by its extension."""
    try:
        with open(path, "rb") as handle:
            return handle.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False
