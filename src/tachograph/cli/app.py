"""The root ``tacho`` command group and the conventions every command follows.

Conventions (for every command module, built in or plugged in):

- The global ``--store URL`` (or ``TACHOGRAPH_STORE``) lives on the context object, a
  :class:`CliState`; a command opens the store with :func:`open_store`, which turns a missing
  or broken store into an error that says where it looked (exit :data:`EXIT_STORE`).
- Every read command takes ``--json`` (the :func:`json_option` decorator, parameter
  ``as_json``) and then writes exactly one JSON document to stdout with :func:`emit_json`.
  Errors always go to stderr, as text.
- Exit codes: :data:`EXIT_OK` (0) success; :data:`EXIT_FAILED` (1) a verification failure, a
  divergence or failing tests; :data:`EXIT_USAGE` (2) a usage error (bad option, an agent that
  does not import, a confirmation that is required); :data:`EXIT_STORE` (3) the store cannot be
  opened or read, or the run is not in it, or a read's ``--purpose`` is denied
  (:class:`~tachograph.errors.PurposeDenied`); :data:`EXIT_PIPE` (141) stdout's reader went
  away. A :class:`~tachograph.errors.TachographError` that escapes a command is mapped to one
  of these by :class:`TachoGroup`, and stdout failing (:data:`CANNOT_WRITE`) to 141 or 2,
  or 1 once the command has said its result is a failure (:func:`mark_failed`).
- A command module ``tachograph.cli.<name>`` defines ``register(group)``, which adds its
  commands. :data:`COMMANDS` names the module of each command; a module is imported when one
  of its commands is asked for (or all of them, for ``tacho --help``), so that a command
  starts without importing the others. The modules named in :data:`PLUGGED` are optional:
  when one does not exist, its commands are absent.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import io
import math
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn, TypeVar

import click
import orjson

from ..errors import (
    AgentLoadError,
    ConfirmationRequired,
    PolicyError,
    ProfileError,
    RunNotFound,
    StoreError,
    StoreNotFound,
    TachographError,
)
from ..store import RunInfo, Store, store_url
from ..store import open_store as _open_store
from ..views.text import escape, escape_json, redact_url, spell_surrogates
from . import EXIT_INTERRUPTED, EXIT_TERMINATED, interrupt_in, own_streams

__all__ = [
    "COMMANDS",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE",
    "EXIT_STORE",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "PLUGGED",
    "CliError",
    "CliState",
    "TachoGroup",
    "agent_output",
    "cli",
    "emit_json",
    "emit_json_rows",
    "exit_code_for",
    "json_option",
    "load_plugged",
    "mark_failed",
    "open_store",
    "regular_file",
    "resolve_run",
    "state",
]

EXIT_OK = 0
"""Success: the command did what was asked (a run verified, a replay reproduced)."""
EXIT_FAILED = 1
"""A verification failure, a divergence, or failing tests."""
EXIT_USAGE = 2
"""A usage error: a bad option or argument, an agent path that does not import."""
EXIT_STORE = 3
"""The store cannot be opened or read, or the named run is not in it."""
EXIT_PIPE = 141
"""The reader of stdout went away (``| head``): the output was cut short, as a pipe's end
ends other tools (128 + SIGPIPE); not a failure of what the command checked (a command that
has found one exits :data:`EXIT_FAILED` instead)."""

PLUGGED = ("corpus", "otel", "seal", "privacy", "migrate", "doctor")
"""Command modules loaded when present: each defines ``register(cli: click.Group)``."""

COMMANDS: dict[str, str] = {
    **dict.fromkeys(("runs", "show", "state", "verify", "diff", "version"), "commands_inspect"),
    **dict.fromkeys(("replay", "fork", "resume"), "commands_replay"),
    **dict.fromkeys(("export", "import"), "commands_io"),
    "demo": "demo",
    **dict.fromkeys(("save", "test"), "corpus"),
    "otel": "otel",
    **dict.fromkeys(("keys", "seal", "witness", "evidence"), "seal"),
    **dict.fromkeys(("erase", "audit", "retention"), "privacy"),
    "migrate": "migrate",
    "doctor": "doctor",
}
"""Each ``tacho`` command and the module of this package whose ``register`` adds it. A
module is imported when one of its commands is asked for: ``tacho verify`` does not import
the replay layer (50 ms on its own), nor the other commands' dependencies
(``tests/cli/test_cli_app.py`` holds this table to what the modules register)."""

F = TypeVar("F", bound=Callable[..., Any])


class CliError(click.ClickException):
    """An error a person can act on: a message, optional hint lines, and an exit code."""

    def __init__(self, message: str, *, exit_code: int = EXIT_FAILED, hints: Sequence[str] = ()):
        super().__init__(message)
        # click reads exit_code from the instance when it exits; one class per code is overkill.
        self.exit_code = exit_code  # type: ignore[misc]
        self.hints = tuple(hints)

    def show(self, file: IO[Any] | None = None) -> None:
        """Print ``Error: message`` and the hints to stderr."""
        out = file if file is not None else sys.stderr
        if out is None:
            return  # no stderr (2>&-): never stdout, which click.echo writes to instead
        # Messages quote run ids, actors and file contents: recorded text, escaped.
        click.echo(f"Error: {escape(self.format_message())}", file=out)
        for hint in self.hints:
            click.echo(f"  {escape(hint)}", file=out)


@dataclass
class CliState:
    """What the root group hands to every command (``ctx.obj``)."""

    store: str | None = None
    """The ``--store`` URL as given; ``None`` means ``TACHOGRAPH_STORE`` or the default."""

    failed: bool = False
    """Set (by :func:`mark_failed`) once the command knows it exits 1: if stdout's reader
    goes away while it writes, it still exits 1, not 141, which says nothing failed."""

    @property
    def store_url(self) -> str:
        """The store URL in force."""
        return store_url(self.store)


def state(ctx: click.Context | None = None) -> CliState:
    """The :class:`CliState` of the current invocation (a default one outside the root group)."""
    ctx = ctx if ctx is not None else click.get_current_context()
    found = ctx.find_object(CliState)
    if found is None:
        found = ctx.ensure_object(CliState)
    return found


def mark_failed(failed: bool = True) -> None:
    """Say, before writing the output, that the command's result is a failure (exit 1): a
    run that does not verify, runs that differ. A command whose output is then cut short
    (``| head``) exits 1, not 141, so that the failure is not hidden."""
    if failed:
        state().failed = True


def _failed_so_far() -> bool:
    ctx = click.get_current_context(silent=True)
    found = ctx.find_object(CliState) if ctx is not None else None
    return found is not None and found.failed


def open_store(ctx: click.Context | None = None, *, create: bool = False) -> Store:
    """Open the store in force, or raise a :class:`CliError` that says where it looked.

    Read commands pass ``create=False`` (the default) so that a typo in ``--store`` is an error
    and not a new empty store; commands that record or import pass ``create=True``.
    """
    url = state(ctx).store_url
    try:
        return _open_store(url, create=create)
    except StoreNotFound as exc:
        raise CliError(
            str(exc),
            exit_code=EXIT_STORE,
            hints=(
                "Record a run first (try: tacho demo), or point at a store with "
                "--store URL or TACHOGRAPH_STORE.",
            ),
        ) from exc
    except StoreError as exc:
        raise CliError(f"cannot open store {redact_url(url)}: {exc}", exit_code=EXIT_STORE) from exc


def resolve_run(store: Store, run_id: str, *, tenant: str | None = None) -> RunInfo:
    """The run ``run_id`` names: its exact id, or else a unique prefix of at least 6 chars.

    Otherwise :class:`~tachograph.errors.RunNotFound` propagates, with close matches.
    """
    try:
        return store.run_info(run_id, tenant=tenant)
    except RunNotFound:
        if len(run_id) < 6:
            raise
        # the store finds the runs the prefix begins (a range of SQLite's run id index), not
        # every run of the store listed here (1 s for 300,000 runs)
        matches = sorted({i.run_id for i in store.runs(tenant=tenant, prefix=run_id)})
        if not matches:
            raise
        # A run and its forks share a prefix (forks are named RUN.fork-xxxx): the prefix
        # names the run they all descend from.
        roots = [m for m in matches if not any(m.startswith(o + ".") for o in matches if o != m)]
        if len(roots) == 1:
            return store.run_info(roots[0], tenant=tenant)
        shown = ", ".join(roots[:8]) + (", ..." if len(roots) > 8 else "")
        raise RunNotFound(
            f"{run_id!r} is ambiguous: it begins {len(roots)} runs ({shown}); give more of the id",
            run_id=run_id,
            tenant=tenant or store.tenant,
            suggestions=roots[:8],
        ) from None


class _Limit(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on
    """A count of rows where 0 means all: a negative one is refused (it read as "all"), and
    one past 2^53 is all in effect (SQLite's integers end at 2^63 - 1)."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        count = int(click.INT.convert(value, param, ctx))
        if count < 0:
            self.fail(f"{count} is negative (0 means all)", param, ctx)
        return min(count, 2**53)


LIMIT = _Limit()
"""The type of a ``--limit`` option."""


class _Seconds(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on
    """A finite number of seconds, 0 or more (or more than 0): ``inf`` and ``nan``, which
    ``click.FloatRange`` lets through, are refused."""

    name = "seconds"

    def __init__(self, *, zero: bool) -> None:
        self.zero = zero

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        seconds = float(click.FLOAT.convert(value, param, ctx))
        if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not self.zero):
            least = "0 or more" if self.zero else "more than 0"
            self.fail(f"{value!r} is not a finite number of seconds, {least}", param, ctx)
        return seconds


SECONDS = _Seconds(zero=True)
"""Seconds, 0 or more."""
POSITIVE_SECONDS = _Seconds(zero=False)
"""Seconds, more than 0."""


def json_option(fn: F) -> F:
    """Add ``--json`` (parameter ``as_json``): one stable JSON document on stdout."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print one JSON document (stable, documented in docs/cli.md) instead of text.",
    )(fn)


@contextlib.contextmanager
def agent_output(as_json: bool) -> Iterator[None]:
    """While an agent runs under --json, everything it writes to stdout goes to stderr, so that
    stdout holds exactly one JSON document: ``print``, writes to file descriptor 1, and the
    output of the processes it (or a worker pool) starts, which inherit that descriptor."""
    if not as_json:
        yield
        return
    if sys.stdout is not None:
        sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no descriptor 1 at all: only Python's own stdout can be redirected
        with contextlib.redirect_stdout(sys.stderr):
            yield
        return
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
        try:
            os.dup2(2, 1)
        except OSError:  # no descriptor 2 either: what the agent prints goes nowhere
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.close(null)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        for stream in (sys.stdout, sys.__stdout__):
            if stream is not None:
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()  # what was buffered for descriptor 1 goes to stderr too
        os.dup2(saved, 1)
        os.close(saved)


def _unjsonable(value: Any) -> str:
    # What an agent returned, or any other value with no JSON form (a generator, an open
    # file): named by its type and repr, so that --json still prints one document.
    text = repr(value)
    if len(text) > 200:
        text = text[:200] + "..."
    return f"<not JSON: {type(value).__qualname__}: {text}>"


def _json_document(data: Any) -> bytes:
    options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
    try:
        raw = orjson.dumps(data, default=_unjsonable, option=options)
    except TypeError:
        # text a tampered store held as bytes that are not UTF-8 (read back with lone
        # surrogates, which JSON cannot hold): spelled as the text commands show it
        raw = orjson.dumps(spell_surrogates(data), default=_unjsonable, option=options)
    if not raw.isascii() or b"\x7f" in raw:
        # JSON leaves DEL, C1 controls (CSI among them) and bidi overrides raw: written to a
        # terminal (or paged) they act. As \uXXXX escapes the document stays valid and equal.
        raw = escape_json(raw.decode()).encode()
    return raw


def regular_file(path: Path) -> Path:
    """``path`` when it is a regular file, else a usage :class:`CliError` that says what it is
    instead: missing, a folder, or a pipe or device (``<(cmd)``, ``/dev/stdin``), which the
    commands that take a file cannot read (``import`` and ``verify`` read it more than once:
    to verify it, then to use it)."""
    if path.is_file():
        return path
    if not path.exists():
        raise CliError(f"no such file: {path.resolve()}", exit_code=EXIT_USAGE)
    kind = "a folder" if path.is_dir() else "a pipe or device, not a regular file"
    raise CliError(f"{path} is {kind}: save it to a file first", exit_code=EXIT_USAGE)


def emit_json(data: Any) -> None:
    """Write ``data`` as indented JSON with sorted keys, and a newline, to stdout. A value
    with no JSON form is written as a string naming its type and repr."""
    raw = _json_document(data)
    # Text may have been written through sys.stdout before: flush it so the order holds.
    sys.stdout.flush()
    sys.stdout.buffer.write(raw + b"\n")
    sys.stdout.buffer.flush()


def emit_json_rows(data: dict[str, Any], key: str, rows: Sequence[str]) -> None:
    """:func:`emit_json` of ``data`` with ``data[key]`` the list of ``rows``, each a JSON value
    as compact text: the same bytes, written a row at a time, so that a
    long list is held compact rather than as Python values and never as one document."""
    mark = b'"' + os.urandom(16).hex().encode() + b'"'  # a string no other value holds
    head, tail = _json_document({**data, key: orjson.Fragment(mark)}).split(mark)
    out = sys.stdout.buffer
    sys.stdout.flush()
    if not rows:
        out.write(head + b"[]" + tail + b"\n")
        out.flush()
        return
    out.write(head + b"[")
    for n, row in enumerate(rows):
        # a value of a top-level key's list: indented as emit_json indents it, two levels in
        text = _json_document(orjson.loads(row)).replace(b"\n", b"\n    ")
        out.write((b",\n    " if n else b"\n    ") + text)
    out.write(b"\n  ]" + tail + b"\n")
    out.flush()


def exit_code_for(exc: TachographError) -> int:
    """The documented exit code for an error that escaped a command."""
    if isinstance(exc, (AgentLoadError, ConfirmationRequired, PolicyError, ProfileError)):
        return EXIT_USAGE
    if isinstance(exc, StoreError) or isinstance(getattr(exc, "cause", None), StoreError):
        return EXIT_STORE  # a write that failed because the store did (full, read-only)
    # VerificationFailed, Divergence, Unreplayable, FormatError and any other failure of the
    # work itself (as opposed to how it was asked for, or where the runs are).
    return EXIT_FAILED


def _hints_for(exc: TachographError) -> list[str]:
    if isinstance(exc, RunNotFound):
        suggestions = list(getattr(exc, "suggestions", []) or [])
        if suggestions or exc.tenants or exc.seq is not None:
            # already named in the message: close matches, the tenants that hold the run, or
            # the seqs the run has (an erasure asked for one it has not)
            return []
        if isinstance(exc.tenant, str):  # looked for in one tenant: list that tenant's
            return [
                f"List the runs of tenant {exc.tenant!r} with: tacho runs --tenant "
                + shlex.quote(exc.tenant)
            ]
        return ["List the runs in this store with: tacho runs"]
    if isinstance(exc, ConfirmationRequired):
        return ["Pass --confirm to allow it."]
    if isinstance(exc, StoreError) and exc.several_tenants:
        return [
            "Name the tenant with --tenant T, or in the store URL: tacho --store "
            "'sqlite:///FILE?tenant=T' ... (tacho runs lists each run's tenant)"
        ]
    return []


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that every clean-up runs (a partial export file is
    removed, a store transaction rolled back) instead of the process dying where it stands."""


def _stop_waits_on_ctrl_c() -> None:
    """On Ctrl-C, make every wait for a store lock give up at once, in every thread (the
    writer thread included, which the run's clean-up would otherwise wait for), then raise
    KeyboardInterrupt as usual. SIGTERM does the same, raising :class:`Terminated`."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:

        def handler(signum: int, frame: Any) -> None:
            from ..store.sqlite import interrupt_waits

            interrupt_waits()
            signal.default_int_handler(signum, frame)

        signal.signal(signal.SIGINT, handler)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # else ignored, or someone's own

        def terminate(signum: int, frame: Any) -> None:
            from ..store.sqlite import interrupt_waits

            interrupt_waits()
            raise Terminated

        signal.signal(signal.SIGTERM, terminate)


def _interrupted(exc: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (or :class:`Terminated`) that caused ``exc`` (its cause,
    context or ``cause``), if any."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, KeyboardInterrupt):
            return e
        cause = getattr(e, "cause", None)
        todo.extend(
            (e.__cause__, e.__context__, cause if isinstance(cause, BaseException) else None)
        )
    return None


def _interrupt_code(interrupt: KeyboardInterrupt) -> int:
    return EXIT_TERMINATED if isinstance(interrupt, Terminated) else EXIT_INTERRUPTED


class TachoGroup(click.Group):
    """A group that turns tachograph errors into :class:`CliError` with the right exit code,
    and imports the module of a command (:data:`COMMANDS`) when the command is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command, those of modules not imported yet included."""
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command ``cmd_name``, its module imported (and registered) first if need be;
        ``None`` for an unknown command, or one of an optional module that is absent."""
        module = COMMANDS.get(cmd_name)
        if cmd_name not in self.commands and module is not None:
            load_plugged(self, (module,), __package__ or "tachograph.cli")
        return self.commands.get(cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """click's, with "Did you mean" drawn from every command, not only those imported."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            no_such: Any = getattr(click.exceptions, "NoSuchCommand", None)  # click >= 8.4
            name = getattr(exc, "command_name", None)
            if no_such is None or not isinstance(exc, no_such) or name is None:
                raise
            raise no_such(name, possibilities=self.list_commands(ctx), ctx=ctx) from None

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """click's, with a Ctrl-C while it parses the root options reported as one in the
        command is (130): click's ``main`` calls it an abort, exit 1."""
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except KeyboardInterrupt as interrupt:
            _stopped(interrupt)
        except OSError as exc:  # the root's --help or --version, written here
            if not _writing_output(exc):
                raise
            output_failed(exc)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; map a :class:`TachographError` to its documented exit code."""
        _stop_waits_on_ctrl_c()
        try:
            return super().invoke(ctx)
        except TachographError as exc:
            # a failure that Ctrl-C caused (a write it interrupted) is reported, as 130
            interrupt = _interrupted(exc)
            code = _interrupt_code(interrupt) if interrupt is not None else exit_code_for(exc)
            message = str(exc)
            if isinstance(exc, StoreError) and exc.several_tenants:  # not the API's "tenant="
                message = f"run id {exc.run_id!r} exists under several tenants"
            raise CliError(message, exit_code=code, hints=_hints_for(exc)) from exc
        except KeyboardInterrupt as interrupt:
            _stopped(interrupt)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # click's own ends of a command (Exit and Abort are RuntimeErrors)
        except OSError as exc:
            if not _writing_output(exc):
                raise
            output_failed(exc)
        except Exception as exc:
            # Python wraps an exception raised in a class's __set_name__ (3.10, 3.11): an
            # interrupt that lands while a command's module defines a dataclass is a
            # RuntimeError caused by it
            wrapped = interrupt_in(exc)
            if wrapped is None:
                raise
            _stopped(wrapped)


_WRITERS = frozenset({__name__, "tachograph.cli.render", "click.utils", "rich.console"})
"""The modules whose frames write a command's output."""
CANNOT_WRITE = frozenset({errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def _writing_output(exc: OSError) -> bool:
    """Whether ``exc`` is stdout failing (its pipe closed, its disk full): raised by a write
    in one of the output's writers (the innermost frame of its traceback)."""
    if exc.errno not in CANNOT_WRITE or exc.filename is not None:
        return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_globals.get("__name__") in _WRITERS


def _quiet(stream: IO[str]) -> None:
    """Point ``stream``'s descriptor at the null device, so that what it still holds is
    flushed there when the interpreter closes it (the recipe of Python's ``signal`` docs)."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, stream.fileno())
        finally:
            os.close(null)


def output_failed(exc: OSError, *, failed: bool | None = None) -> NoReturn:
    """End a command whose output cannot be written: 141 when the reader went away (no
    message: it asked for no more), else an error on stderr and 2 (as for ``export -o``);
    1 either way for a command that knew its result is a failure (``failed``, by default
    whether it said so with :func:`mark_failed`). The streams are made quiet first: Python
    flushes them again at exit."""
    if failed is None:
        failed = _failed_so_far()
    if sys.stdout is not None:
        _quiet(sys.stdout)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stdout until the process ends
    if exc.errno != errno.EPIPE:
        with contextlib.suppress(OSError):
            click.echo(f"Error: cannot write the output: {exc.strerror or exc}", err=True)
    if failed:
        raise click.exceptions.Exit(EXIT_FAILED)
    raise click.exceptions.Exit(EXIT_PIPE if exc.errno == errno.EPIPE else EXIT_USAGE)


def _stopped(interrupt: KeyboardInterrupt) -> NoReturn:
    """Report an interrupt (Ctrl-C, SIGTERM) and exit 130 or 143, as shells report them: not
    1, which says a run failed to verify."""
    terminated = isinstance(interrupt, Terminated)
    click.echo("\nTerminated." if terminated else "\nAborted!", err=True)
    raise click.exceptions.Exit(_interrupt_code(interrupt)) from None


@click.group(cls=TachoGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    "store",
    envvar="TACHOGRAPH_STORE",
    metavar="URL",
    default=None,
    help="Store URL (sqlite:///path.db or a path). Default: TACHOGRAPH_STORE, "
    "else ./.tachograph/tachograph.db.",
)
@click.version_option(None, "-V", "--version", package_name="tachograph", prog_name="tacho")
@click.pass_context
def cli(ctx: click.Context, store: str | None) -> None:
    """tacho: record, verify, inspect and replay AI agent runs.

    Start with `tacho demo`, then `tacho runs` and `tacho show RUN`.
    """
    ctx.ensure_object(CliState).store = store


def load_plugged(group: click.Group, names: Sequence[str], package: str) -> list[str]:
    """Import ``package.name`` for each name and call its ``register(group)``.

    A module that does not exist is skipped; any other error (including a missing dependency
    inside a module that does exist) propagates, so that a broken command is never silently
    absent. Returns the names that were loaded.
    """
    loaded = []
    for name in names:
        qualified = f"{package}.{name}"
        try:
            plugged = importlib.import_module(qualified)
        except ModuleNotFoundError as exc:
            if exc.name != qualified:
                raise
            continue
        plugged.register(group)
        loaded.append(name)
    return loaded


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``tacho`` console script."""
    own_streams()
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="tacho")
    except SystemExit as done:
        # output still buffered is written here, not at the interpreter's exit (where a
        # closed pipe is an "Exception ignored" and exit 120)
        try:
            if sys.stdout is not None:
                sys.stdout.flush()
        except OSError as exc:
            try:
                output_failed(exc, failed=done.code == EXIT_FAILED)
            except click.exceptions.Exit as failed:
                raise SystemExit(failed.exit_code) from None
        raise done


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
