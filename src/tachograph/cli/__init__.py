"""The ``tacho`` command line (needs click and rich, imported only here).

``tacho = "tachograph.cli:main"``. The root group and its conventions are in :mod:`.app`.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "MAX_WORKERS",
    "interrupt_in",
    "is_sqlite_file",
    "main",
    "own_streams",
    "verify_workers",
]


EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C, SIGINT): 128 + the signal's number, as a shell reports it."""
EXIT_TERMINATED = 143
"""128 + SIGTERM: ``tacho`` was stopped by ``kill``, ``timeout``, systemd or Kubernetes.

Both defined here, where click is not imported, so that a Ctrl-C in the import phase is
reported with them (see main); :mod:`.app` takes them from here."""


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``tacho`` with ``argv`` (default: the process arguments)."""
    # Ctrl-C before the command could take it (the command's own handling is in
    # app.TachoGroup.invoke): while Python imports the command line, a tenth of a second or
    # more, or while it ends workers started ahead. Reported as the command reports it, not
    # as a traceback of whatever was being imported.
    own_streams()
    try:
        _import_orjson()
        _main(argv)
    except KeyboardInterrupt as interrupt:
        _stopped(interrupt)
    except Exception as exc:
        # an interrupt Python wrapped: raised in a class's __set_name__ (3.10, 3.11) as a
        # module imported, it is a RuntimeError caused by it
        wrapped = interrupt_in(exc)
        if wrapped is None:
            raise
        _stopped(wrapped)


class _Dropping(io.RawIOBase):
    """stderr's descriptor as a raw stream that drops what cannot be written."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        try:
            return os.isatty(self._fd)
        except OSError:
            return False

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError:
            pass  # a closed pipe, a full disk: the message is lost, the command goes on
        return memoryview(data).nbytes


def _null_fd(fd: int) -> None:
    """Open the null device on descriptor ``fd`` if it is closed (``>&-``), so that no file
    the command opens lands there (and is written to as stdout or stderr)."""
    try:
        os.fstat(fd)
    except OSError:
        null = os.open(os.devnull, os.O_WRONLY)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)


def own_streams() -> None:
    """Make ``tacho``'s standard streams safe to write to, before a command runs.

    A closed stdout or stderr (``>&-``, ``2>&-``: Python's ``sys.stdout`` or ``sys.stderr``
    is then ``None``) is the null device, as ``> /dev/null`` would be: what goes there is
    lost, and an error meant for stderr never reaches stdout (click writes to stdout when
    stderr is ``None``). And stderr drops what it cannot write (a closed pipe, a full disk):
    a message, a warning or a progress bar that fails must not end the command or change its
    exit status, which belong to what it does and to stdout. Only the process's own streams
    are replaced (not those a caller of :func:`main` redirected); calling it again does
    nothing."""
    if sys.stdout is None:
        _null_fd(1)
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - until exit
    if sys.stderr is None:
        _null_fd(2)
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - until exit
    elif (own := sys.__stderr__) is not None and sys.stderr is own:
        try:
            fd = own.fileno()
            own.flush()
        except (OSError, ValueError):
            return  # not a descriptor's stream: left as it is
        sys.stderr = io.TextIOWrapper(
            io.BufferedWriter(_Dropping(fd)),
            encoding=own.encoding,
            errors=own.errors,
            line_buffering=True,
        )


def _stopped(interrupt: KeyboardInterrupt) -> NoReturn:
    """Say so and exit 130, or 143 for SIGTERM (a KeyboardInterrupt only once app has
    installed its handler), as app does."""
    app = sys.modules.get(f"{__name__}.app")
    if app is not None and isinstance(interrupt, app.Terminated):
        sys.stderr.write("\nTerminated.\n")
        raise SystemExit(EXIT_TERMINATED) from None
    sys.stderr.write("\nAborted!\n")
    raise SystemExit(EXIT_INTERRUPTED) from None


def interrupt_in(exc: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (Ctrl-C, or SIGTERM in ``tacho``) that caused ``exc``, if any:
    ``exc`` itself, its ``__cause__``, or its ``__context__`` unless dropped (``raise ...
    from None``), and theirs. Python 3.10 and 3.11 wrap what a class's ``__set_name__``
    raises in a RuntimeError, so an interrupt that lands while a module defines a dataclass
    comes out as one."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    return None


def _import_orjson() -> None:
    """Import orjson, which every command uses, with Ctrl-C deferred until it has imported.

    orjson's module initialisation imports modules of the standard library and goes on as if
    they had imported (ijl/orjson#310): a KeyboardInterrupt raised in one of them crashes the
    interpreter (SIGSEGV). With orjson 3.13, 176 of 200 SIGINTs sent while ``import orjson``
    ran did. Here a Ctrl-C meanwhile is noted by a handler that raises nothing, and raised
    once the import is done. Only where Python's own handler is in place, in the main
    thread (``tacho`` always)."""
    if "orjson" in sys.modules or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    caught: list[int] = []
    try:
        signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    except ValueError:  # not the main thread: no handler of its own can be set
        return
    try:
        import orjson  # noqa: F401
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if caught:
        raise KeyboardInterrupt


def _main(argv: Sequence[str] | None) -> None:
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


MAX_WORKERS = 256
"""The most processes ``--workers`` takes (``tacho verify``, ``tacho test``): more is refused
as a usage error, and no worker is started for it before the options are read."""


def _count(value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        return 1
    return count if count <= MAX_WORKERS else 1


def is_sqlite_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a SQLite file (``tacho verify store.db``): a store is recognised
    by its content (the SQLite header), not by its extension."""
    try:
        with open(path, "rb") as handle:
            return handle.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False
