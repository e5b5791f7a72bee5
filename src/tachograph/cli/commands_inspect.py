"""Read commands: ``runs``, ``show``, ``state``, ``verify``, ``diff``, ``version``."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import os
import platform
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click
import orjson

from ..capture.vouch import FIELD as UNVOUCHED
from ..capture.vouch import HOW_TO_RECORD, UnvouchedScan, unvouched_calls
from ..errors import FormatError, PrivacyError, StoreError, TachographError
from ..lifecycle.blobs import BlobCheck
from ..record.event import FORMAT_VERSION, Event
from ..record.jsonl import read_jsonl, verify_jsonl
from ..record.scan import RowScan
from ..record.seal import hide_key_secret, process_actor
from ..record.verify import VerifyReport
from ..store import DEFAULT_STORE, RunInfo, Store, verify_all, verify_stored
from ..store import open_store as open_store_raw
from ..views.captured import NOT_CAPTURED, display_payload
from ..views.text import redact_url, spell_surrogates
from ..views.timeline import (
    TimelineRow,
    event_row,
    is_dry_run,
    run_rows,
    time_of,
    timeline_row,
    timeline_rows,
)
from . import MAX_WORKERS, blobcheck, is_sqlite_file
from .app import (
    EXIT_FAILED,
    EXIT_STORE,
    EXIT_USAGE,
    LIMIT,
    CliError,
    emit_json,
    emit_json_rows,
    json_option,
    mark_failed,
    open_store,
    regular_file,
    resolve_run,
    state,
)
from .privacy import purpose_option, scoped_store
from .render import Output, event_style

__all__ = [
    "register",
    "render_with_seal",
    "require_witnesses",
    "run_header",
    "seal_verdicts_of",
    "show_timeline",
    "tampered_line",
    "verification_of",
    "with_seal",
]

_TIMELINE_HEADERS = ("SEQ", "TIME", "ACTOR", "TYPE", "SUMMARY")
_STATUS_STYLES = {"ok": "green", "error": "bold red", "aborted": "yellow", None: "dim"}


def shown_payload(event: Event) -> dict[str, Any] | None:
    """The payload as a person reads it: the run's key secret marked hidden (SPEC section 5)."""
    if event.payload is None:
        return None
    return hide_key_secret(event.type, event.payload, mark=True)


def run_header(out: Output, info: RunInfo, first: Event | None) -> None:
    """The lines above a timeline: id, actor, status, events, parent and dry-run marks."""
    status = info.status or "unfinished"
    out.line(f"run {info.run_id}", style="bold")
    out.line(
        f"  actor {info.actor}  tenant {info.tenant}  status {status}  "
        f"events {info.events}  started {info.started_at}"
    )
    payload = first.payload if first is not None and isinstance(first.payload, dict) else {}
    parent = payload.get("parent")
    if isinstance(parent, dict):
        out.line(f"  fork of {parent.get('run_id')} at seq {parent.get('seq')}")
    if first is not None and is_dry_run(first):
        out.line("  DRY RUN: tools that write were simulated in this run", style="bold yellow")


def unvouched_line(calls: list[dict[str, Any]]) -> str:
    """One line naming the tool calls a run's record cannot vouch for, and the fix."""
    listed = ", ".join(f"{c['tool']!r} (asked at seq {c['seq']})" for c in calls)
    return (
        f"  UNVOUCHED: the model asked for {len(calls)} tool call(s) that left no tool event: "
        f"{listed}; a replay cannot serve or compare them. To record them, {HOW_TO_RECORD}."
    )


def tampered_line(report: VerifyReport) -> str:
    """The line that marks what a command shows of a run that fails verification: the
    report, and every seq that fails when there are several."""
    seqs = sorted({f.seq for f in report.failures})
    text = f"TAMPERED: {report.render()}"
    if len(seqs) > 1:
        shown = ", ".join(str(s) for s in seqs[:10]) + (", ..." if len(seqs) > 10 else "")
        text += f"; failing seqs: {shown}"
    return text


def seal_of(store: Store, run_id: str, tenant: str) -> Any:
    """The run's sealing verdict, as ``tacho verify RUN`` and ``show`` give it: a run its
    owner cut or changed after it was sealed verifies as a chain, and fails here."""
    from ..sealing.verdict import seal_verdict_of  # here: only for a run's content

    return seal_verdict_of(store, run_id, tenant)


def _unvouched(events: Iterable[Event]) -> list[dict[str, Any]]:
    return [c.to_dict() for c in unvouched_calls(events)]


def show_timeline(
    out: Output, events: list[Event], *, full: bool = False, tampered: frozenset[int] = frozenset()
) -> None:
    """Print a run's events as an aligned timeline (and payloads with ``full``).

    The seqs in ``tampered`` (events that fail verification) are marked ``TAMPERED``.
    """
    if full:
        for n, event in enumerate(events):
            if n:
                out.line()
            mark = "  DRY RUN" if is_dry_run(event) else ""
            if event.seq in tampered:
                mark += "  TAMPERED"
            out.line(
                f"{event.seq:>4}  {time_of(event.ts)}  {event.actor}  {event.type}{mark}",
                style=event_style(event),
            )
            extras = {
                k: v
                for k, v in (
                    ("idempotency_key", event.idempotency_key),
                    ("model", event.model),
                    ("seed", event.seed),
                )
                if v is not None
            }
            for key, value in extras.items():
                out.line(f"      {key}: {value}", style="dim")
            if event.erased:
                out.line("      (payload erased)", style="dim")
            elif event.payload is None and event.payload_bytes is not None:
                out.line(f"      {NOT_JSON}", style="bold red")
            else:
                shown, missing = display_payload(event.type, shown_payload(event))
                for name in missing:
                    out.line(f"      {name}: {NOT_CAPTURED}", style="bold dim")
                out.json(shown, indent=6)
        return
    rows = timeline_rows(events, tampered)
    _print_timeline(out, rows, [event_style(event) for event in events])


def _print_timeline(out: Output, rows: Sequence[TimelineRow], styles: Sequence[str]) -> None:
    """Print timeline rows as an aligned table; ``styles`` are their events' styles."""
    cells: list[tuple[str | None, ...]] = [
        (
            "dim",
            "dim",
            None,
            style,
            "bold red" if row.tampered else "bold yellow" if row.dry_run else None,
        )
        for row, style in zip(rows, styles, strict=True)
    ]
    out.table(
        _TIMELINE_HEADERS, [row.cells() for row in rows], cell_styles=cells, keep=("SEQ", "TYPE")
    )


def as_timestamp(text: str | None, option: str) -> str | None:
    """An ISO 8601 time (date alone, space or ``T``, any offset) as a stored UTC timestamp."""
    if text is None:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise CliError(
            f"{option} {text!r} is not an ISO 8601 time; e.g. 2026-11-29, 2026-11-29T16:30 "
            "or 2026-11-29 16:30:00+01:00 (times without an offset are UTC)",
            exit_code=EXIT_USAGE,
        ) from None
    if moment.tzinfo is not None:
        try:
            moment = moment.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        except OverflowError:  # 9999-12-31T23:59-14:00 is past the calendar's end in UTC
            raise CliError(
                f"{option} {text!r} is outside the years 1 to 9999 in UTC",
                exit_code=EXIT_USAGE,
            ) from None
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _stored_actors(actor: str) -> list[str]:
    """``actor`` as a recording in this environment stores it (docs/privacy.md), under each
    key of the environment's ring (a run recorded before a rotation holds an older key's
    token), leaving out the actor as given: runs recorded before actors were redacted hold
    it so, and are asked for with it. Without the key ``TACHOGRAPH_PII=on`` asks for, the
    secrets redaction alone."""
    # here, not at the top: every command of this module (``tacho verify`` among them) would
    # pay for compiling the detectors
    from ..privacy.redactor import default_processors, under_every_key

    try:
        chain = default_processors()
    except PrivacyError as exc:
        # listing records nothing: go on without tokens, but say what is not asked for
        click.echo(
            f"warning: {exc}; --actor asks for the actor as given and without the PII "
            "policy's tokens",
            err=True,
        )
        chain = default_processors(environ={})
    found: list[str] = []
    for processors in under_every_key(chain):
        stored = process_actor(processors, actor)
        if stored != actor and stored not in found:
            found.append(stored)
    return found


@click.command("runs", short_help="List runs, newest first.")
@click.option(
    "--actor",
    help="Only runs by this actor (as given, and as a recording in this environment stores "
    "it: an e-mail is its token under TACHOGRAPH_PII=on).",
)
@click.option(
    "--status",
    type=click.Choice(["ok", "error", "aborted", "unfinished"]),
    help="Only runs that finished so, or have not finished.",
)
@click.option("--since", metavar="TIME", help="Only runs started at or after this ISO 8601 time.")
@click.option("--until", metavar="TIME", help="Only runs started before this ISO 8601 time.")
@click.option("--tenant", help="Only runs of this tenant.")
@click.option(
    "--limit",
    type=LIMIT,
    default=50,
    show_default=True,
    help="At most this many runs, newest first (0: all).",
)
@json_option
def runs_cmd(
    actor: str | None,
    status: str | None,
    since: str | None,
    until: str | None,
    tenant: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List runs, newest first, with filters."""
    since_ts = as_timestamp(since, "--since")
    until_ts = as_timestamp(until, "--until")
    actors: list[str | None] = [actor, *_stored_actors(actor)] if actor else [None]
    with open_store() as store:
        found = [
            info
            for name in actors
            for info in store.runs(
                actor=name,
                status=status,
                since=since_ts,
                until=until_ts,
                tenant=tenant,
                limit=None if limit == 0 else limit + 1,
            )
        ]
        if len(actors) > 1:  # newest first, as one query gives them
            found.sort(key=lambda r: r.started_at, reverse=True)
        more = limit != 0 and len(found) > limit
        found = found[:limit] if limit else found
        if as_json:
            emit_json({"store": store.url, "runs": [r.to_dict() for r in found], "more": more})
            return
        out = Output()
        if not found:
            filtered = any(v is not None for v in (actor, status, since, until, tenant))
            out.line(f"no runs in {store.url}" + (" match these filters" if filtered else ""))
            return
        rows: list[tuple[str, ...]] = [row.cells() for row in run_rows(found)]
        cells: list[tuple[str | None, ...]] = [
            (None, None, "dim", None, _STATUS_STYLES.get(r.status, "")) for r in found
        ]
        headers: tuple[str, ...] = ("RUN", "ACTOR", "STARTED", "EVENTS", "STATUS")
        if len({r.tenant for r in found}) > 1:
            # one id may name a run of each tenant: the rows would read as duplicates
            rows = [(row[0], r.tenant, *row[1:]) for row, r in zip(rows, found, strict=True)]
            cells = [(c[0], None, *c[1:]) for c in cells]
            headers = ("RUN", "TENANT", *headers[1:])
        out.table(headers, rows, cell_styles=cells, keep=("RUN", "TENANT", "EVENTS", "STATUS"))
        if more:
            out.line(f"(showing the newest {limit}; --limit 0 for all)", style="dim")


@click.command("show", short_help="Show a run's timeline.")
@click.argument("run_id", metavar="RUN")
@click.option("--full", is_flag=True, help="Print every payload, pretty-printed.")
@click.option("--tenant", help="The run's tenant, if its id exists under several.")
@purpose_option
@json_option
def show_cmd(run_id: str, full: bool, tenant: str | None, purpose: str, as_json: bool) -> None:
    """Show a run as a timeline: seq, time, actor, type and a one-line summary."""
    with open_store() as raw:
        store = scoped_store(raw, purpose)
        info = resolve_run(store, run_id, tenant=tenant)
        # What is shown must say when it cannot be trusted: verify what is read (first, so
        # that each row is marked as it is read), and hold it against its seals (a run its
        # owner cut or changed after sealing verifies alone).
        # Its blobs too (SPEC section 6), in the same read: an event whose blob does not
        # match its reference is marked as a tampered one is.
        report = verify_stored(raw, info.run_id, tenant=info.tenant, scans=blobcheck.scans_of(raw))
        blobs = blobcheck.of_report(raw, report)
        blobs_fail = blobs is not None and not blobs.ok
        tampered = frozenset(f.seq for f in report.failures)
        if blobs is not None:
            tampered |= blobs.failed_seqs()
        shown = _Shown(tampered, as_json=as_json, full=full)
        # One read of what the purpose may see (one audit record), kept as it will be
        # printed rather than as events (which a run of 100,000 held at 1.8 KB each). The
        # payloads are decoded here, so that one that is not JSON is shown as such.
        read = shown.take(store.read(info.run_id, tenant=info.tenant, decode=False))
        unvouched = [c.to_dict() for c in unvouched_calls(read)]
        collections.deque(read, maxlen=0)  # the rows after the last one the ledger needed
        seal = None
        if shown.first is not None:
            from ..sealing.verdict import seal_verdict_of

            seal = seal_verdict_of(raw, info.run_id, info.tenant)
    failed = not report.ok or blobs_fail or (seal is not None and not seal.ok)
    mark_failed(failed)
    if as_json:
        emit_json_rows(
            {
                "run": info.to_dict(),
                "verification": _with_blobs(verification_of(report, seal), blobs),
                "seal": seal.to_dict() if seal is not None else None,
                "unvouched": unvouched,
            },
            "events",
            shown.rows,
        )
    else:
        _show_text(info, report, blobs, seal, unvouched, shown, full=full)
    if failed:
        sys.exit(EXIT_FAILED)  # shown whole, and marked: as state and diff, a failure


def _show_text(
    info: RunInfo,
    report: VerifyReport,
    blobs: BlobCheck | None,
    seal: Any,
    unvouched: list[dict[str, Any]],
    shown: _Shown,
    *,
    full: bool,
) -> None:
    out = Output()
    run_header(out, info, shown.first)
    if not report.ok or (blobs is not None and not blobs.ok):
        out.line(f"  TAMPERED: {blobcheck.headline(report, blobs)}", style="bold red")
    if seal is not None and not seal.ok:
        out.line(f"  SEAL FAILED: {seal.reason}", style="bold red")
    elif seal is not None and seal.sealed_seq is not None:
        how = "signed checkpoint" if seal.status == "sealed" else "store's own seals only"
        out.line(f"  sealed up to seq {seal.sealed_seq} ({how})", style="dim")
    if unvouched:
        out.line(unvouched_line(unvouched), style="bold yellow")
    out.line()
    if full:
        show_timeline(out, shown.rows, full=True, tampered=shown.tampered)
    else:
        _print_timeline(out, shown.rows, shown.styles)


class _Shown:
    """What ``tacho show`` prints of a run's events, gathered as they are read: the rows of
    the timeline (with their styles), each row's ``--json`` value as compact JSON, or with
    ``--full`` the events themselves (every payload is printed)."""

    def __init__(self, tampered: frozenset[int], *, as_json: bool, full: bool) -> None:
        self.tampered = tampered
        self.as_json = as_json
        self.full = full
        self.first: Event | None = None
        self.rows: list[Any] = []
        self.styles: list[str] = []

    def take(self, events: Iterable[Event]) -> Iterator[Event]:
        """``events`` (read undecoded), passed on decoded as each is kept. A payload that
        is not JSON (changed behind the store's back; verification marks it) is left
        ``None`` and its row says so."""
        rows = self.rows
        for event in events:
            readable = _decode_payload(event)
            if self.first is None:
                self.first = event
            if self.as_json:
                rows.append(self._json_row(event, readable))
            elif self.full:
                rows.append(event)
            else:
                row = timeline_row(event, event.seq in self.tampered)
                if not readable:
                    mark = "TAMPERED  " if row.tampered else ""
                    row = dataclasses.replace(row, summary=mark + NOT_JSON)
                rows.append(row)
                self.styles.append(event_style(event))
            yield event

    def _json_row(self, event: Event, readable: bool = True) -> str:
        row = event_row(event)
        row["tampered"] = event.seq in self.tampered
        if not readable:
            row["summary"] = NOT_JSON
        if self.full:
            row["payload"] = shown_payload(event)
            row["hash"] = event.hash
        # As text: the bytes orjson returns keep the 4 KB it first allocated (see
        # record.event.stored_json; 4.1 KB for each of 100,000 rows of 313 bytes, as text 380)
        try:
            return orjson.dumps(row).decode()
        except TypeError:  # text stored as bytes that are not UTF-8: a tampered row
            return orjson.dumps(spell_surrogates(row)).decode()


NOT_JSON = "(the stored payload is not valid JSON)"
"""What ``show`` says of a payload whose stored bytes do not parse."""


def _decode_payload(event: Event) -> bool:
    """Decode the stored payload of ``event``, read undecoded, in place (the event is the
    read's own); False when the bytes are not JSON, the payload then left ``None``."""
    if event.payload is not None or event.payload_bytes is None:
        return True
    try:
        payload = orjson.loads(event.payload_bytes)
    except (orjson.JSONDecodeError, TypeError):
        return False
    object.__setattr__(event, "payload", payload)  # as record.jsonl sets a read event's bytes
    return True


@click.command("state", short_help="Print the state at step N (the fold).")
@click.argument("run_id", metavar="RUN")
@click.option(
    "--at", "at", type=int, default=None, metavar="N", help="Fold up to seq N (default: the end)."
)
@click.option("--tenant", help="The run's tenant, if its id exists under several.")
@purpose_option
@json_option
def state_cmd(run_id: str, at: int | None, tenant: str | None, purpose: str, as_json: bool) -> None:
    """Print the state the agent had reached at step N (the fold of events 0..N).

    A run that does not verify is still folded, marked TAMPERED, and exits 1."""
    with open_store() as raw:
        store = scoped_store(raw, purpose)
        info = resolve_run(store, run_id, tenant=tenant)
        run_id = info.run_id
        if at is not None and not 0 <= at < info.events:
            raise CliError(
                f"--at {at} is outside run {run_id} (seq 0..{info.events - 1})",
                exit_code=EXIT_USAGE,
            )
        from ..replay.fold import fold  # here: the replay layer loads in 50 ms, and every
        # command of this module (``tacho verify`` first) would pay it at its start

        # As ``show``: the state is shown, and marked when the run fails verification. The
        # rows are verified as stored: through a purpose, a withheld payload verifies as erased.
        report = verify_stored(raw, run_id, tenant=info.tenant)
        seal = seal_of(raw, run_id, info.tenant)
        result = fold(store.read(run_id, tenant=info.tenant), at)
    data = result.to_dict()
    mark_failed(not report.ok or not seal.ok)
    if as_json:
        emit_json({**data, "verification": verification_of(report, seal), "seal": seal.to_dict()})
    else:
        out = Output()
        out.line(f"state of {run_id} after seq {result.last_seq} ({result.status})", style="bold")
        if not report.ok:
            out.line(tampered_line(report), style="bold red")
        if not seal.ok:
            out.line(f"SEAL FAILED: {seal.reason}", style="bold red")
        out.json(data)
    if not report.ok or not seal.ok:
        sys.exit(EXIT_FAILED)


def _verify_reports(
    store: Store,
    out: Output,
    run_id: str | None,
    workers: int = 1,
    scans: Sequence[RowScan] = (),
    *,
    tenant: str | None = None,
) -> list[VerifyReport]:
    if run_id is not None:
        info = resolve_run(store, run_id, tenant=tenant)
        with out.progress(info.events, f"verifying {info.run_id}") as advance:
            return [
                verify_stored(
                    store,
                    info.run_id,
                    tenant=info.tenant,
                    progress=advance,
                    workers=workers,
                    scans=scans,
                )
            ]
    total = store.count_events()
    with out.progress(total, "verifying") as advance:
        return list(verify_all(store, progress=advance, workers=workers, scans=scans))


def _verify_file(path: Path, out: Output) -> list[VerifyReport]:
    with out.progress(None, f"verifying {path.name}") as advance:
        try:
            return verify_jsonl(path, progress=advance)
        except FormatError as exc:
            raise CliError(str(exc), exit_code=EXIT_FAILED) from exc


_LIST_VERIFIED = 20
"""Up to this many runs, ``verify`` prints a line for each verified run too."""


def _looks_like_file(target: str) -> bool:
    return os.sep in target or "/" in target or target.endswith((".jsonl", ".json"))


def _open_store_at(path: str) -> Store:
    try:
        return open_store_raw(path, create=False)
    except StoreError as exc:
        raise CliError(f"cannot open store {path}: {exc}", exit_code=EXIT_STORE) from exc


_EVIDENCE = "an evidence folder"
_JSONL = "a JSONL file"
_STORE_FILE = "a store file"
_STORE = "the store"

_OFFLINE = "it is checked offline, against --key and the cosignatures it carries (--witness-key)"
_CHAIN_ONLY = (
    "a file's runs are checked as hash chains only, with no seal log to hold them to (write "
    "a run's evidence folder with tacho evidence, and verify that)"
)
_NOT_APPLICABLE: dict[str, dict[str, str]] = {
    _EVIDENCE: {
        "--witness": _OFFLINE + ", and no witness is consulted",
        "--workers": "it holds one run, verified in this process",
        "--tenant": "it holds one run, of the tenant its proof names",
    },
    _JSONL: {
        "--key": _CHAIN_ONLY,
        "--witness": _CHAIN_ONLY,
        "--witness-key": _CHAIN_ONLY,
        "--min-witnesses": _CHAIN_ONLY,
        "--workers": "a file is verified in this process",
        "--tenant": "every run of the file is verified (--tenant names a RUN's tenant)",
    },
    _STORE_FILE: {
        "--tenant": "every run of the store is verified (--tenant names a RUN's tenant: give "
        "the store as --store and the RUN)",
    },
}
"""Per kind of target, the options that have no effect on it, and why: each is refused."""

_PARAMS = {
    "keys": "--key",
    "witnesses": "--witness",
    "witness_keys": "--witness-key",
    "min_witnesses": "--min-witnesses",
    "workers": "--workers",
    "tenant": "--tenant",
}


def _target_kind(target: str | None) -> str:
    """What ``tacho verify TARGET`` verifies, decided as the command decides it."""
    if target is None:
        return _STORE
    if Path(target).is_dir():
        return _EVIDENCE
    if Path(target).is_file() and is_sqlite_file(target):
        return _STORE_FILE
    if Path(target).is_file() or _looks_like_file(target):
        return _JSONL
    return _STORE  # a RUN


def _given_options() -> list[str]:
    """The options of this ``verify`` given on its command line (not left to their default)."""
    ctx = click.get_current_context()
    given = []
    for param, option in _PARAMS.items():
        source = ctx.get_parameter_source(param)
        if source is not None and source is not click.core.ParameterSource.DEFAULT:
            given.append(option)
    return given


def _refuse_what_does_not_apply(
    kind: str,
    *,
    given: Sequence[str],
    witnesses: Sequence[str],
    witness_keys: Sequence[str],
    min_witnesses: int,
) -> None:
    """A usage error for an option that would have no effect on the target: an option that
    is silently ignored reads as a check that was made."""
    for option in given:
        why = _NOT_APPLICABLE.get(kind, {}).get(option)
        if why is not None:
            raise click.UsageError(f"{option} does not apply to {kind}: {why}")
    if kind in (_STORE, _STORE_FILE) and not witnesses:
        if min_witnesses > 0:
            raise click.UsageError(
                "--min-witnesses needs --witness (and --witness-key) for a store: a store "
                "keeps no cosignature (its checkpoints are signed by the log key only), so "
                "the witnesses that cosigned its checkpoints must be consulted"
            )
        if witness_keys:
            raise click.UsageError(
                "--witness-key needs --witness for a store: it vouches for the checkpoints a "
                "witness holds, and no witness is consulted"
            )
    if min_witnesses > 0 and not witness_keys:
        raise click.UsageError(
            "--min-witnesses counts cosignatures by trusted witness keys: give the "
            "--witness-key of each witness whose cosignature counts"
        )


def require_witnesses(verdicts: dict[Any, Any], min_witnesses: int) -> dict[Any, Any]:
    """The sealing verdicts with the runs that ``min_witnesses`` trusted witnesses do not
    vouch for failed: a run's latest seal under the trusted checkpoint must be covered by
    a checkpoint each of ``min_witnesses`` witnesses (by key name) cosigned."""
    if min_witnesses <= 0:
        return verdicts
    held = {}
    for key, verdict in verdicts.items():
        names = sorted(set(verdict.witnessed_by))
        if verdict.ok and len(names) < min_witnesses:
            if verdict.status == "sealed":
                cosigned = f" ({', '.join(names)})" if names else ""
                why = (
                    f"{len(names)} witness(es){cosigned} cosigned a checkpoint covering its "
                    f"seal at seq {verdict.sealed_seq}; --min-witnesses asks for {min_witnesses}"
                )
            else:
                why = (
                    f"no trusted checkpoint covers it ({verdict.status}: {verdict.reason}); "
                    f"--min-witnesses asks for {min_witnesses} witness cosignature(s)"
                )
            verdict = dataclasses.replace(verdict, status="failed", reason=why)
        held[key] = verdict
    return held


@click.command("verify", short_help="Verify runs, a store, a JSONL file or an evidence folder.")
@click.argument("target", metavar="[RUN|FILE|DIR]", required=False)
@click.option("--all", "all_runs", is_flag=True, help="Verify every run in the store (default).")
@click.option("--key", "keys", multiple=True, help="Trusted log verifier key (string or file).")
@click.option("--witness", "witnesses", multiple=True, help="Witness URL or directory to consult.")
@click.option("--witness-key", "witness_keys", multiple=True, help="Trusted witness key.")
@click.option(
    "--min-witnesses",
    default=0,
    type=click.IntRange(min=0),
    help="Witness cosignatures each run needs (a store: with --witness).",
)
@click.option(
    "--workers",
    default=1,
    type=click.IntRange(min=1, max=MAX_WORKERS),
    show_default=True,
    help="Processes that verify a store's runs, this one included (large runs in chunks).",
)
@click.option("--tenant", help="With RUN: the run's tenant, if its id exists under several.")
@json_option
def verify_cmd(
    target: str | None,
    all_runs: bool,
    keys: tuple[str, ...],
    witnesses: tuple[str, ...],
    witness_keys: tuple[str, ...],
    min_witnesses: int,
    workers: int,
    tenant: str | None,
    as_json: bool,
) -> None:
    """Verify the hash chain of a run, of every run, or of a JSONL file (SPEC section 8),
    and say per stored run how far it is sealed (SPEC section 9).

    With no argument every run in the store is verified. A FILE is a JSONL export; a DIR is
    an evidence folder (tacho evidence), checked offline against --key. Exits 1 if anything
    fails, naming the run, the seq and the check that failed.
    """
    if target is not None and all_runs:
        raise click.UsageError("give a RUN or FILE, or --all, not both")
    if tenant is not None and target is None:
        raise click.UsageError("--tenant names a RUN's tenant: give the RUN")
    kind = _target_kind(target)
    _refuse_what_does_not_apply(
        kind,
        given=_given_options(),
        witnesses=witnesses,
        witness_keys=witness_keys,
        min_witnesses=min_witnesses,
    )
    if target is not None and kind == _EVIDENCE:
        from .seal import verify_evidence_dir

        verify_evidence_dir(Path(target), keys, witness_keys, min_witnesses, as_json)
        return
    out = Output()
    verdicts: dict[Any, Any] = {}
    unvouched: dict[tuple[str | None, str | None], list[dict[str, Any]]] = {}
    orphans: dict[str, str] = {}  # tenant -> what its seal log shows with no run left
    unrecorded: dict[tuple[str | None, str | None], list[int]] = {}  # erased, no audit record
    if target is not None and kind == _STORE_FILE:
        # ``tacho verify store.db``: every run of that store, as ``--store store.db verify``.
        with _open_store_at(target) as store:
            source = store.url
            reports = _verify_reports(store, out, None, workers, blobcheck.scans_of(store))
            verdicts = seal_verdicts_of(store, reports, keys, witnesses, witness_keys)
            verdicts = require_witnesses(verdicts, min_witnesses)
            orphans = orphan_seals_of(store, reports, keys, witnesses, witness_keys)
            unrecorded = erasures_without_record(store, reports)
            blobs = blobcheck.of_reports(store, reports)
        target = None
    elif target is not None and kind == _JSONL:
        path = regular_file(Path(target))
        source = str(path)
        reports = _verify_file(path, out)
        unvouched = _unvouched_in_file(path)
        blobs = blobcheck.check_file(path, reports)
    else:
        with open_store() as store:
            source = store.url
            # The blobs of every run and, for one run, the tool calls its record cannot vouch
            # for are read from the rows as they are verified (in the workers, if any): one
            # read of the run, streamed, and a tampered payload is the report's.
            scans = blobcheck.scans_of(store)
            if target is not None:
                scans.append(UnvouchedScan())
            reports = _verify_reports(store, out, target, workers, scans, tenant=tenant)
            verdicts = seal_verdicts_of(store, reports, keys, witnesses, witness_keys)
            verdicts = require_witnesses(verdicts, min_witnesses)
            if target is None:
                orphans = orphan_seals_of(store, reports, keys, witnesses, witness_keys)
            unrecorded = erasures_without_record(store, reports)
            for r in reports:
                calls = r.scanned.get(UNVOUCHED)
                if r.run_id is not None and calls is not None:
                    unvouched[(r.tenant, r.run_id)] = [c.to_dict() for c in calls]
            blobs = blobcheck.of_reports(store, reports)
    failed = [
        r
        for r in reports
        if not r.ok
        or not verdicts.get((r.tenant, r.run_id), _NO_SEAL).ok
        or not blobs.get((r.tenant, r.run_id), _NO_SEAL).ok
    ]
    # An empty file handed over as evidence proves nothing: that is a failure, not a pass.
    # (An empty store is merely empty.)
    empty_file = not reports and target is not None and Path(target).is_file()
    mark_failed(bool(failed or empty_file or orphans))
    if as_json:
        emit_json(
            {
                "source": source,
                "ok": not failed and not empty_file and not orphans,
                "runs": [
                    {
                        **_with_blobs(
                            with_seal(r, verdicts.get((r.tenant, r.run_id))),
                            blobs.get((r.tenant, r.run_id)),
                        ),
                        # wherever the check ran (one run, a file), even with none found
                        **(
                            {"unvouched": unvouched[(r.tenant, r.run_id)]}
                            if (r.tenant, r.run_id) in unvouched
                            else {}
                        ),
                        **(
                            {"erased_without_record": unrecorded[(r.tenant, r.run_id)]}
                            if unrecorded.get((r.tenant, r.run_id))
                            else {}
                        ),
                    }
                    for r in reports
                ],
                "verified": len(reports) - len(failed),
                "failed": len(failed),
                "blobs": blobcheck.totals(blobs),
                **(
                    {"seal_logs": [{"tenant": t, "problem": p} for t, p in orphans.items()]}
                    if orphans
                    else {}
                ),
            }
        )
    else:
        # A large store gets a summary and its failures, not one line per verified run.
        listed = reports if len(reports) <= _LIST_VERIFIED else failed
        for report in listed:
            verdict = verdicts.get((report.tenant, report.run_id))
            check = blobs.get((report.tenant, report.run_id))
            fine = report.ok and (verdict is None or verdict.ok) and (check is None or check.ok)
            out.line(
                render_with_seal(report, verdict, check),
                style="green" if fine else "bold red",
            )
            calls = unvouched.get((report.tenant, report.run_id))
            if calls:
                out.line(unvouched_line(calls), style="bold yellow")
        for (_tenant, run_id), seqs in unrecorded.items():
            out.line(f"  {run_id}: {erased_without_record_line(seqs)}", style="bold yellow")
        for report in reports:
            # a run's blobs get a line when it has any (listed or not: expired ones are news)
            check = blobs.get((report.tenant, report.run_id))
            if check is None or check.empty:
                continue
            if report not in listed and not (check.expired or check.failures or check.malformed):
                continue
            style = (
                "bold red"
                if check.failures
                else "yellow"
                if check.expired or check.malformed
                else "green"
            )
            for line in check.render().split("\n"):
                out.line("  " + line, style=style)
        for tenant, problem in orphans.items():
            out.line(f"seal log of tenant {tenant}: SEAL FAILED: {problem}", style="bold red")
        if not reports:
            out.line(
                f"no runs in {source}" + (": an empty file verifies nothing" if empty_file else ""),
                style="bold red" if empty_file else None,
            )
        elif target is None or len(reports) > 1:
            out.line(
                f"{len(reports) - len(failed)} of {len(reports)} run(s) verified"
                + (f", {len(failed)} FAILED" if failed else ""),
                style="bold red" if failed else "bold green",
            )
    if failed or empty_file or orphans:
        sys.exit(EXIT_FAILED)


def _unvouched_in_file(path: Path) -> dict[tuple[str | None, str | None], list[dict[str, Any]]]:
    try:
        runs = read_jsonl(path)
    except (TachographError, OSError):
        return {}  # verification has said what is wrong with the file
    return {(r[0].tenant, r[0].run_id): _unvouched(list(r)) for r in runs if r}


class _NoSeal:
    ok = True


_NO_SEAL = _NoSeal()


def seal_verdicts_of(
    store: Store,
    reports: list[VerifyReport],
    keys: tuple[str, ...] = (),
    witnesses: tuple[str, ...] = (),
    witness_keys: tuple[str, ...] = (),
) -> dict[Any, Any]:
    """The sealing verdict of each verified report's run, as ``tacho verify`` gives it."""
    # The sealing commands are optional (they need the [seal] extra to check signatures).
    try:
        from .seal import seal_verdicts
    except ImportError:  # pragma: no cover - a trimmed installation
        return {}
    verified = [r for r in reports if r.ok]
    return seal_verdicts(store, verified, keys=keys, witnesses=witnesses, witness_keys=witness_keys)


def erasures_without_record(
    store: Store, reports: list[VerifyReport]
) -> dict[tuple[str | None, str | None], list[int]]:
    """The erased seqs of each verified run that no ``erase`` record of the store audit names.

    Every erasure through tachograph (``tacho erase``, retention) records the run and seqs in
    the store audit in its own transaction; a payload nulled behind the store's back, or an
    audit cut after the record, leaves erased seqs with no record. So do runs imported or
    migrated already erased, which is why this is a warning, not a failure.
    """
    wanted = {(r.tenant, r.run_id): set(r.erased) for r in reports if r.erased}
    if not wanted:
        return {}
    recorded: dict[tuple[str | None, str | None], set[int]] = {}
    try:
        for record in store.read_audit():
            if record.action != "erase":
                continue
            key = (record.tenant, record.detail.get("run_id"))
            if key in wanted:
                seqs = record.detail.get("seqs") or []
                recorded.setdefault(key, set()).update(s for s in seqs if isinstance(s, int))
    except TachographError:
        return {}  # an audit this store will not let us read: nothing to hold the runs to
    missing = {key: sorted(seqs - recorded.get(key, set())) for key, seqs in wanted.items()}
    return {key: seqs for key, seqs in missing.items() if seqs}


def erased_without_record_line(seqs: list[int]) -> str:
    """The warning for erased seqs that no erase record of the store audit names."""
    shown = ", ".join(str(s) for s in seqs[:10]) + (", ..." if len(seqs) > 10 else "")
    return (
        f"ERASED WITHOUT RECORD: {len(seqs)} payload(s) (seq {shown}) erased with no erase "
        "record in the store audit: erased outside tachograph, the audit cut, or the run "
        "imported or migrated already erased"
    )


def orphan_seals_of(
    store: Store,
    reports: list[VerifyReport],
    keys: tuple[str, ...] = (),
    witnesses: tuple[str, ...] = (),
    witness_keys: tuple[str, ...] = (),
) -> dict[str, str]:
    """What the seal logs of tenants with no run left in ``reports`` show (whole-store verify)."""
    try:
        from .seal import orphan_seal_problems
    except ImportError:  # pragma: no cover - a trimmed installation
        return {}
    return orphan_seal_problems(
        store, reports, keys=keys, witnesses=witnesses, witness_keys=witness_keys
    )


def _with_blobs(data: dict[str, Any], check: BlobCheck | None) -> dict[str, Any]:
    """A run's verification report as JSON with its blob check (``blobs``); a blob that
    fails fails the run."""
    if check is not None:
        data["blobs"] = {k: v for k, v in check.to_dict().items() if k != "run_id"}
        if not check.ok:
            data["status"] = "failed"
    return data


def render_with_seal(report: VerifyReport, verdict: Any, blobs: BlobCheck | None = None) -> str:
    """A run's verification line with its sealing verdict in place of the chain-only
    "unsealed" remark (which knows nothing of the seal log); a run whose chain holds but
    whose ``blobs`` check fails is named as failing (:func:`blobcheck.headline`)."""
    text = blobcheck.headline(report, blobs)
    if verdict is None:
        return text
    return text.split("; unsealed (", 1)[0] + "; " + str(verdict.render())


def with_seal(report: VerifyReport, verdict: Any) -> dict[str, Any]:
    """A run's verification report as JSON, with its sealing verdict (``seal``, ``sealed``)."""
    data = verification_of(report, verdict)
    if verdict is not None:
        data["seal"] = verdict.to_dict()
    return data


def verification_of(report: VerifyReport, verdict: Any) -> dict[str, Any]:
    """A run's verification report as JSON, as ``tacho verify --json`` gives its status:
    ``failed`` when its seal fails (a run cut or changed after it was sealed verifies as a
    chain), and ``sealed`` true when a trusted checkpoint covers it. The verdict itself goes
    beside it (``seal``), where a command shows it. A run whose chain fails is not held
    against its seals (as ``verify``): it is failed, and not sealed, whatever they say."""
    data = report.to_dict()
    if verdict is not None and report.ok:
        data["sealed"] = verdict.status == "sealed"
        if not verdict.ok:
            data["status"] = "failed"
    return data


@click.command("diff", short_help="Show where two runs first differ.")
@click.argument("run_a", metavar="RUN_A")
@click.argument("run_b", metavar="RUN_B")
@click.option("--tenant", help="The run's tenant, if its id exists under several.")
@purpose_option
@json_option
def diff_cmd(run_a: str, run_b: str, tenant: str | None, purpose: str, as_json: bool) -> None:
    """Show the first step where two runs differ. Exits 1 when they differ, like diff(1).

    Payloads are read for --purpose (recorded in the store audit); what it may not read is
    compared as withheld. A run that does not verify is still compared, marked TAMPERED,
    and exits 1."""
    from ..replay.diff import diff_runs  # here: see state_cmd

    with open_store() as raw:
        store = scoped_store(raw, purpose)
        a = resolve_run(store, run_a, tenant=tenant)
        b = resolve_run(store, run_b, tenant=tenant)
        # As ``show``: what is compared is marked when it fails verification (as stored).
        keys = [(a.tenant, a.run_id), (b.tenant, b.run_id)]
        checked = {k: verify_stored(raw, k[1], tenant=k[0]) for k in dict.fromkeys(keys)}
        seals = {k: seal_of(raw, k[1], k[0]) for k in checked}
        reports = [checked[k] for k in keys]
        result = diff_runs(
            store.read(a.run_id, tenant=a.tenant),
            store.read(b.run_id, tenant=b.tenant),
            names=(a.run_id, b.run_id),
        )
    verified = all(r.ok for r in reports) and all(v.ok for v in seals.values())
    mark_failed(not result.same or not verified)
    if as_json:
        emit_json(
            {
                **result.to_dict(),
                "verification": {
                    "ok": verified,
                    "run_a": verification_of(reports[0], seals[keys[0]]),
                    "run_b": verification_of(reports[1], seals[keys[1]]),
                    "seal_a": seals[keys[0]].to_dict(),
                    "seal_b": seals[keys[1]].to_dict(),
                },
            }
        )
    else:
        out = Output()
        for key, report in checked.items():  # a run named twice is marked once
            if not report.ok:
                out.line(tampered_line(report), style="bold red")
            if not seals[key].ok:
                out.line(f"SEAL FAILED: {key[1]}: {seals[key].reason}", style="bold red")
        # split at line feeds only: a recorded CR or U+2028 is escaped, never a line break
        lines = result.render().rstrip("\n").split("\n")
        out.line(lines[0], style="bold green" if result.same else "bold red")
        for line in lines[1:]:
            out.line(line)
    if not result.same or not verified:
        sys.exit(EXIT_FAILED)


@click.command("version", short_help="Print versions and the store in use.")
@json_option
def version_cmd(as_json: bool) -> None:
    """Print the versions of tachograph, its record format and Python, and the store in use."""
    from .. import __version__

    data = {
        "tachograph": __version__,
        "format_version": FORMAT_VERSION,
        "python": platform.python_version(),
        # the URL as given may hold a password (postgresql://app:pw@..., ?password=)
        "store": redact_url(state().store_url),
        "default_store": DEFAULT_STORE,
    }
    if as_json:
        emit_json(data)
        return
    out = Output()
    out.line(f"tachograph {__version__} (record format v{FORMAT_VERSION})")
    out.line(f"python {data['python']}")
    out.line(f"store {data['store']}")


def register(group: click.Group) -> None:
    """Add the read commands to ``group``."""
    for command in (runs_cmd, show_cmd, state_cmd, verify_cmd, diff_cmd, version_cmd):
        group.add_command(command)
