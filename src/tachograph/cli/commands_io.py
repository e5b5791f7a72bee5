"""Moving runs in and out of a store: ``export`` and ``import`` (JSONL, SPEC section 4)."""

from __future__ import annotations

import codecs
import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, NoReturn

import click

from ..errors import FormatError, StoreError, StoreNotFound, VerificationFailed
from ..privacy.redactor import default_processors
from ..record.files import write_whole
from ..record.jsonl import ImportRefused, Refusal, export_run, import_jsonl, verify_jsonl
from ..store import RunInfo, verify_stored
from ..store import open_store as open_store_raw
from ..views.text import escape, escape_json
from .app import (
    CANNOT_WRITE,
    EXIT_FAILED,
    EXIT_STORE,
    EXIT_USAGE,
    CliError,
    emit_json,
    json_option,
    mark_failed,
    open_store,
    output_failed,
    regular_file,
    resolve_run,
    state,
)
from .privacy import purpose_option, scoped_store
from .render import Output

__all__ = ["register"]


@contextlib.contextmanager
def _destination(path: str | None) -> Iterator[IO[bytes]]:
    """Where an export goes: stdout, a file written whole or not at all, or, when PATH is a
    device, a FIFO or another file that is not a regular one, that file itself.

    A regular file (or a new one) is written under a fresh temporary name beside it and
    renamed over it once complete, so that a failed export leaves no half file and an old
    export is replaced only by a whole new one. A symbolic link is followed, as a shell's
    ``>`` follows it: the file it names is replaced, not the link. A device or a FIFO
    (``/dev/stdout``, ``/dev/null``, a named pipe) cannot be replaced without breaking it for
    everyone else: it is written in place, and a write it refuses (``/dev/full``) fails the
    export.
    """
    if path is None or path == "-":
        try:
            sys.stdout.flush()
            stream = sys.stdout.buffer
            if sys.stdout.isatty():
                # on a terminal, recorded text must not move the cursor or reorder the line:
                # the characters JSON leaves raw (DEL, C1, bidi, separators) become \u
                # escapes, which keep every line valid JSON of the same values (a pipe gets
                # the bytes)
                yield _TerminalSafe(stream)  # type: ignore[misc]
            else:
                yield stream
            stream.flush()
        except OSError as exc:  # `| head` done reading, a full disk under `> file`
            if exc.errno not in CANNOT_WRITE or exc.filename is not None:
                raise
            output_failed(exc)
        return
    target = Path(path)
    if target.is_dir() or path.endswith(("/", os.sep)):
        raise CliError(
            f"-o {path}: is a directory; give the name of the file to write "
            f"(e.g. {Path(path) / 'runs.jsonl'})",
            exit_code=EXIT_USAGE,
        )
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror}", exit_code=EXIT_USAGE) from exc
    if mode is not None and not stat.S_ISREG(mode):
        yield from _in_place(path)
        return
    try:
        # Only a complete export gets the real name: a half-written file would not verify.
        with write_whole(target) as handle:
            yield handle
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror}", exit_code=EXIT_USAGE) from exc


class _TerminalSafe:
    """A binary stream that writes JSON lines through :func:`escape_json`."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def write(self, data: bytes) -> int:
        self._stream.write(escape_json(self._decoder.decode(data)).encode("utf-8"))
        return len(data)

    def flush(self) -> None:
        self._stream.flush()


def _in_place(path: str) -> Iterator[IO[bytes]]:
    try:
        handle = open(path, "wb")  # noqa: SIM115 - closed below, after the last write
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror}", exit_code=EXIT_USAGE) from exc
    try:
        with handle:
            yield handle
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror}", exit_code=EXIT_USAGE) from exc


@click.command("export", short_help="Export runs as JSONL.")
@click.argument("run_ids", metavar="[RUN]...", nargs=-1)
@click.option("--all", "all_runs", is_flag=True, help="Export every run in the store.")
@click.option(
    "-o",
    "--output",
    "--out",  # the name evidence and keys init give it
    "output",
    metavar="FILE",
    help="Write to FILE instead of stdout ('-' for stdout).",
)
@click.option(
    "--blobs",
    "with_blobs",
    is_flag=True,
    help="Also copy the blobs the runs reference into FILE.blobs/ (needs --output).",
)
@click.option(
    "--tenant",
    "only_tenant",
    help="The runs' tenant: of a RUN whose id exists under several, or with --all the "
    "tenant whose runs are exported.",
)
@purpose_option
def export_cmd(
    run_ids: tuple[str, ...],
    all_runs: bool,
    output: str | None,
    with_blobs: bool,
    only_tenant: str | None,
    purpose: str,
) -> None:
    """Export runs as JSON Lines (SPEC section 4), one event per line, in seq order.

    Payloads the --purpose may not read are exported erased (payload and salt null), so the
    file still verifies.
    """
    if bool(run_ids) == all_runs:
        raise click.UsageError("name one or more runs, or give --all")
    if with_blobs and output in (None, "-"):
        raise click.UsageError("--blobs needs --output FILE (the blobs go to FILE.blobs/)")
    with open_store() as raw:
        store = scoped_store(raw, purpose, whole_events=True)

        def named(run_id: str) -> RunInfo:
            return resolve_run(store, run_id, tenant=only_tenant)

        keys = (
            [k for k in store.run_keys() if only_tenant is None or k[0] == only_tenant]
            if all_runs
            # a run named twice (or by its id and a prefix) is exported once
            else list(dict.fromkeys((i.tenant, i.run_id) for i in map(named, run_ids)))
        )
        # Exported bytes are the stored ones, tampered or not (they are the evidence), but a
        # run that does not verify is named on stderr and the export exits 1; so is one whose
        # blob does not match its reference (SPEC section 6: check 5), read as it verifies.
        from . import blobcheck

        scans = blobcheck.scans_of(raw)
        reports = [
            verify_stored(raw, run_id, tenant=tenant, scans=scans) for tenant, run_id in keys
        ]
        blobs = [blobcheck.of_report(raw, report) for report in reports]
        failed = [
            (report, check)
            for report, check in zip(reports, blobs, strict=True)
            if not report.ok or (check is not None and not check.ok)
        ]
        # and held against its seals (each tenant's log audited once): a run its owner cut
        # after sealing verifies as a chain
        from .commands_inspect import seal_verdicts_of

        unsealed = [
            (run_id, verdict)
            for (_tenant, run_id), verdict in seal_verdicts_of(raw, reports).items()
            if not verdict.ok
        ]
        # named before the data, which a reader may stop reading (| head): it exits 1, not 141
        mark_failed(bool(failed or unsealed))
        for report, check in failed:
            click.echo(f"TAMPERED: {escape(blobcheck.headline(report, check))}", err=True)
        for run_id, verdict in unsealed:
            click.echo(f"SEAL FAILED: {escape(f'{run_id}: {verdict.reason}')}", err=True)
        total = 0
        with _destination(output) as out:
            for tenant, run_id in keys:
                total += export_run(store, run_id, out, tenant=tenant)
        copied = _export_blobs(raw, store, keys, output) if with_blobs and output else 0
    if output not in (None, "-"):
        blobs_note = f" and {copied} blob(s) to {output}.blobs" if with_blobs else ""
        click.echo(
            escape(f"exported {len(keys)} run(s), {total} events to {output}{blobs_note}"),
            err=True,
        )
    if failed or unsealed:
        sys.exit(EXIT_FAILED)


def _export_blobs(raw: Any, store: Any, keys: list[tuple[str, str]], output: str) -> int:
    from ..lifecycle.blobs import BlobStore, copy_blobs

    source, dest = BlobStore.beside(raw), BlobStore(f"{output}.blobs")
    return sum(
        copy_blobs(store.read(run_id, tenant=tenant), source, dest) for tenant, run_id in keys
    )


def _count_lines(path: Path) -> int:
    count = 0
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            count += block.count(b"\n")
    return count


def _refuse(
    failed: list[Any],
    path: Path,
    as_json: bool,
    *,
    refused: list[Refusal] | None = None,
    exit_code: int = EXIT_FAILED,
) -> NoReturn:
    """Report an import that stored nothing (text on stderr, or the JSON report on stdout)."""
    if refused is None:
        refused = [
            Refusal(
                "verification",
                r.render(),
                run_id=r.run_id,
                tenant=r.tenant,
                seq=r.first_failure.seq if r.first_failure else None,
            )
            for r in failed
        ]
    if as_json:
        emit_json(
            {
                "ok": False,
                "stored": False,
                "runs": [r.to_dict() for r in failed],
                "events": 0,
                "written": 0,
                "duplicates": 0,
                "refused": [r.to_dict() for r in refused],
            }
        )
    else:
        click.echo(f"Error: import refused, nothing stored ({escape(str(path))})", err=True)
        for r in refused:
            click.echo(f"  {escape(r.message)}", err=True)
    sys.exit(exit_code)


@click.command("import", short_help="Import a JSONL file (verified first).")
@click.argument("file", metavar="FILE", type=click.Path(dir_okay=False))
@click.option(
    "--no-redact",
    "no_redact",
    is_flag=True,
    help="Store the payloads as they are, without the default redaction of secrets "
    "(and of personal data with TACHOGRAPH_PII=on).",
)
@json_option
def import_cmd(file: str, no_redact: bool, as_json: bool) -> None:
    """Import runs from a JSONL file, after verifying every one of them.

    The file is stored whole or not at all (one transaction). A file with any run that does
    not verify, or with an event the store refuses (another event at that seq, an event id
    already used), is refused whole (exit 1); a store that fails (a full disk, an I/O error)
    stores nothing either (exit 3). Events already in the store are skipped, so importing
    twice is harmless. Payloads are redacted as a recording's are (docs/privacy.md): a run
    whose payloads that changes is stored re-chained over the redacted payloads.
    """
    path = regular_file(Path(file))
    if _blank(path):
        # as ``tacho verify`` says of it: a file with no line holds no run to import
        _refuse(
            [],
            path,
            as_json,
            refused=[Refusal("verification", f"no runs in {path}: an empty file imports nothing")],
        )
    out = Output()
    try:
        try:
            store = open_store_raw(state().store_url, create=False)
        except StoreNotFound:
            # No store yet: verify before creating one, so a refused file leaves nothing.
            try:
                failed = [r for r in verify_jsonl(path) if not r.ok]
            except FormatError as exc:
                _refuse([], path, as_json, refused=[Refusal("verification", str(exc))])
            if failed:
                _refuse(failed, path, as_json)
            store = open_store_raw(state().store_url, create=True)
    except StoreError as exc:
        # the store cannot be opened: refused like a store that fails mid-import (exit 3),
        # with the JSON report under --json
        _refuse([], path, as_json, refused=[Refusal("store", str(exc))], exit_code=EXIT_STORE)
    with store:
        total = _count_lines(path) if out.err_is_terminal else None
        try:
            with out.progress(total, f"importing {path.name}") as advance:
                chain = () if no_redact else default_processors()
                report = import_jsonl(store, path, progress=advance, processors=chain)
        except VerificationFailed as exc:
            _refuse(list(getattr(exc, "reports", []) or []), path, as_json)
        except ImportRefused as exc:
            _refuse(list(exc.report.runs), path, as_json, refused=list(exc.report.refused))
        except FormatError as exc:
            _refuse([], path, as_json, refused=[Refusal("verification", str(exc))])
        except StoreError as exc:
            _refuse(
                [],
                path,
                as_json,
                refused=[Refusal("store", str(exc))],
                exit_code=EXIT_STORE,
            )
    if as_json:
        emit_json(report.to_dict())
        return
    out.line(
        f"imported {len(report.runs)} run(s) from {path.name}: {report.written} events written, "
        f"{report.duplicates} already present",
        style="bold green",
    )
    for r in report.runs:
        out.line(f"  {r.run_id}  {r.events} events  verified", style="green")
    if report.redacted:
        out.line(
            f"  {report.redacted} event(s) redacted before storing; their runs were re-chained",
            style="yellow",
        )


def _blank(path: Path) -> bool:
    """True when ``path`` holds nothing but white space (read until a byte that is not)."""
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 16):
            if chunk.strip():
                return False
    return True


def register(group: click.Group) -> None:
    """Add ``export`` and ``import`` to ``group``."""
    group.add_command(export_cmd)
    group.add_command(import_cmd)
