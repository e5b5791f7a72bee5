"""The ``tacho`` command line (needs click and rich, imported only here).

``tacho = "tachograph.cli:main"``. The root group and its conventions are in :mod:`.app`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main", "verify_workers"]


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``tacho`` with ``argv`` (default: the process arguments)."""
    workers = verify_workers(sys.argv[1:] if argv is None else argv)
    if workers < 2:
        from .app import main as run

        run(argv)
        return
    # ``tacho verify --workers N``: its N - 1 worker processes start now, and import the
    # library (about a tenth of a second) while this process imports the command line,
    # parses the options and opens the store. The verification takes them if it needs them
    # (a store's runs, one large run); whatever it did not take is ended.
    from ..store.parallel import prestart, stop_prestarted

    prestart(workers)
    try:
        from .app import main as run

        run(argv)
    finally:
        stop_prestarted()


def verify_workers(argv: Sequence[str]) -> int:
    """The ``--workers`` of a ``tacho [--store URL] verify ... --workers N`` command line,
    read before click parses it (1 for any other command line, and for one click would
    reject or answer with help).

    An estimate that starts workers early, not the parse: the command still parses its own
    options, and workers started for a verification that needs none (a JSONL file, a
    PostgreSQL store, one small run) are ended when the command ends."""
    args = list(argv)
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] == "--store":
            i += 2
        elif args[i].startswith("--store="):
            i += 1
        else:
            return 1  # --help, --version or an option click will refuse
    if i >= len(args) or args[i] != "verify":
        return 1
    workers = 1
    rest = args[i + 1 :]
    for j, arg in enumerate(rest):
        if arg in ("-h", "--help"):
            return 1
        if arg == "--":
            break
        if arg == "--workers" and j + 1 < len(rest):
            value = rest[j + 1]
        elif arg.startswith("--workers="):
            value = arg.removeprefix("--workers=")
        else:
            continue
        try:
            workers = int(value)
        except ValueError:
            return 1
    return workers
