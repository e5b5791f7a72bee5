"""``tacho migrate SRC DST``: copy every run from one store to another, across engines.

Each run is verified in the source before it is copied and in the destination after. A run the
destination already holds in full (same head) and that verifies there is skipped, and a run it
holds in part continues from its head, so a migration killed at any moment is resumed by
running the same command again: appends are atomic per batch and dedupe what is there. A run's
data-subject links (what ``tacho erase --subject`` finds) go with it, once it verifies in the
destination: without them, an erasure asked of the new store would find nothing to erase.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

import click

from ..errors import RunNotFound, StoreError, StoreNotFound
from ..record.event import Event
from ..store import Store, verify_stored
from ..store import open_store as open_store_raw
from ..views.text import escape, redact_url
from .app import EXIT_FAILED, EXIT_STORE, CliError, emit_json, json_option

__all__ = ["MigrateReport", "migrate", "register"]


@dataclass
class MigrateReport:
    """What a migration did, run by run."""

    runs: int = 0
    copied_runs: int = 0
    skipped_runs: int = 0
    resumed_runs: int = 0
    events_copied: int = 0
    subject_links: int = 0
    """Data-subject links the destination did not hold yet, copied with their runs."""
    failed: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "copied_runs": self.copied_runs,
            "skipped_runs": self.skipped_runs,
            "resumed_runs": self.resumed_runs,
            "events_copied": self.events_copied,
            "subject_links": self.subject_links,
            "failed": self.failed,
            "ok": not self.failed,
        }


def _batches(store: Store, run_id: str, tenant: str, from_seq: int, size: int, until: int) -> Any:
    # Only the events verified before the copy (seqs below ``until``): a run still being
    # recorded goes on past them, and what was not verified is not copied (the next migrate
    # copies it, resuming).
    batch: list[Event] = []
    for event in store.read(run_id, tenant=tenant, from_seq=from_seq):
        if event.seq >= until:
            break
        batch.append(event)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def migrate(
    src: Store,
    dst: Store,
    *,
    batch: int = 1000,
    progress: Any = None,
) -> MigrateReport:
    """Copy every run of ``src`` into ``dst``; see the module's docstring."""
    report = MigrateReport()
    for tenant, run_id in sorted(src.run_keys()):
        report.runs += 1
        before = verify_stored(src, run_id, tenant=tenant)
        if not before.ok:
            report.failed.append(
                {"tenant": tenant, "run_id": run_id, "where": "source", "report": before.render()}
            )
            continue
        head = dst.head(run_id, tenant=tenant)
        if head is not None and head == (before.events - 1, before.head):
            after = verify_stored(dst, run_id, tenant=tenant)
            if after.ok:
                report.skipped_runs += 1
                report.subject_links += _copy_links(src, dst, tenant, run_id)
                if progress is not None:
                    progress(f"{tenant}/{run_id}: already copied and verified ({after.events})")
                continue
        start = 0 if head is None else head[0] + 1
        if head is not None:
            report.resumed_runs += 1
        copied = 0
        for events in _batches(src, run_id, tenant, start, batch, before.events):
            dst.append(events)
            copied += len(events)
            if progress is not None:
                progress(f"{tenant}/{run_id}: {start + copied}/{before.events} events")
        after = verify_stored(dst, run_id, tenant=tenant)
        report.events_copied += copied
        if not after.ok or after.head != before.head or after.events != before.events:
            report.failed.append(
                {"tenant": tenant, "run_id": run_id, "where": "destination",
                 "report": after.render()}
            )  # fmt: skip
            continue
        report.subject_links += _copy_links(src, dst, tenant, run_id)
        report.copied_runs += 1
    return report


def _copy_links(src: Store, dst: Store, tenant: str, run_id: str) -> int:
    """Copy one run's data-subject links (linking twice is harmless: a resumed migration
    copies only what is missing); how many were new."""
    links = src.run_subjects(tenant, run_id)
    return dst.link_subjects(tenant, run_id, links) if links else 0


def _open(url: str, *, create: bool, role: str) -> Store:
    try:
        return open_store_raw(url, create=create)
    except StoreNotFound as exc:
        # the store's own message names --store and TACHOGRAPH_STORE: here SRC or DST was
        where = getattr(exc, "location", None) or redact_url(url)
        raise CliError(f"no tachograph store at {where} ({role})", exit_code=EXIT_STORE) from exc
    except StoreError as exc:
        raise CliError(
            f"cannot open store {redact_url(url)} ({role}): {exc}", exit_code=EXIT_STORE
        ) from exc


@click.command("migrate")
@click.argument("src", metavar="SRC")
@click.argument("dst", metavar="DST")
@click.option(
    "--batch", type=click.IntRange(1, 100_000), default=1000, show_default=True,
    help="Events per append (one transaction each) in the destination.",
)  # fmt: skip
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
@json_option
def migrate_command(src: str, dst: str, batch: int, quiet: bool, as_json: bool) -> None:
    """Copy every run from store SRC to store DST (URLs), verifying each before and after.

    Runs already in DST in full are skipped; partly copied runs continue from their head, so
    an interrupted migration resumes when run again. Exit 1 if any run fails to verify.
    """
    source = _open(src, create=False, role="SRC")
    try:
        target = _open(dst, create=True, role="DST")
        try:
            started = time.monotonic()

            def progress(line: str) -> None:
                if not quiet:
                    click.echo(escape(line), file=sys.stderr)

            try:
                report = migrate(source, target, batch=batch, progress=progress)
            except RunNotFound as exc:
                raise CliError(str(exc), exit_code=EXIT_STORE) from exc
            elapsed = time.monotonic() - started
        finally:
            target.close()
    finally:
        source.close()
    if as_json:
        emit_json({**report.to_dict(), "src": source.url, "dst": target.url})
    else:
        click.echo(
            f"{report.runs} runs: {report.copied_runs} copied ({report.resumed_runs} resumed), "
            f"{report.skipped_runs} already there; {report.events_copied} events"
            + (f", {report.subject_links} subject links" if report.subject_links else "")
            + f" in {elapsed:.1f}s"
        )
        for failure in report.failed:
            # the report quotes the stores' own text (a tampered summary's hash): escaped
            click.echo(
                escape(
                    f"FAILED {failure['tenant']}/{failure['run_id']} in the {failure['where']}:\n"
                    f"{failure['report']}",
                    newlines=True,
                )
            )
    if report.failed:
        sys.exit(EXIT_FAILED)


def register(cli: click.Group) -> None:
    """Add ``migrate`` to the root ``tacho`` group."""
    cli.add_command(migrate_command)
