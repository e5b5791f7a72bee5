"""Verifying what a store holds: its rows and its run summary, through :func:`verify_run`.

The store contract has no verification in it; these functions read a run's summary and rows
through the contract and hand them to :func:`~tachograph.record.verify.verify_run`, the one
check that the CLI, replay, fork, resume, the corpus and imports share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from ..errors import RunNotFound, StoreUnavailable
from ..record.bulk import collector_paused
from ..record.event import Event
from ..record.scan import RowScan
from ..record.verify import VerifyReport, verify_run
from .base import RunInfo, Store

__all__ = ["read_verified", "run_summary", "verify_all", "verify_stored"]


def run_summary(store: Store, run_id: str, *, tenant: str | None = None) -> RunInfo | None:
    """The store's summary of a run, or ``None`` for events without one (an orphaned run).

    Read it *before* the rows it is held against: appends only add, so a chain read after its
    summary is never shorter unless events were taken away.
    """
    try:
        return store.run_info(run_id, tenant=tenant)
    except RunNotFound:
        return None


def verify_stored(
    store: Store,
    run_id: str,
    *,
    tenant: str | None = None,
    progress: Callable[[int], None] | None = None,
    workers: int = 1,
    scans: Sequence[RowScan] = (),
) -> VerifyReport:
    """Verify one stored run (SPEC section 8) against its summary, streaming its rows.

    A run the store does not hold raises :class:`~tachograph.errors.RunNotFound` (with close
    matches); a run id under several tenants without ``tenant`` raises
    :class:`~tachograph.errors.StoreError`. With ``workers`` above 1, a large run of a SQLite
    file is verified in chunks by that many processes (:mod:`tachograph.store.parallel`),
    with the same report. ``scans`` read the same rows as they are verified (in the workers
    where there are some): their results are the report's ``scanned``
    (:mod:`tachograph.record.scan`).
    """
    if workers > 1:
        from .parallel import verify_stored_parallel

        return verify_stored_parallel(
            store, run_id, tenant=tenant, workers=workers, progress=progress, scans=scans
        )
    try:
        summary = run_summary(store, run_id, tenant=tenant)
    except (StoreUnavailable, UnicodeError) as exc:
        # A summary the store cannot read (a damaged page; an id that is not UTF-8): this
        # run fails with the reason, as one whose rows cannot be read does, not the others.
        return verify_run(_raising(exc), source=store.url, run_id=run_id, tenant=tenant)
    where = summary.tenant if summary is not None else tenant
    return verify_run(
        store.read_rows(run_id, tenant=where),
        summary,
        source=store.url,
        progress=progress,
        run_id=run_id,
        tenant=where,
        scans=scans,
    )


def _raising(exc: Exception) -> Iterator[Event]:
    """Rows whose read fails with ``exc``."""
    yield from ()
    raise exc


def read_verified(
    store: Store, run_id: str, *, tenant: str | None = None
) -> tuple[list[Event], VerifyReport]:
    """A run's events, decoded, and their report: what replay, fork and resume load.

    One read of the rows, checked exactly as :func:`verify_stored` checks them (the summary is
    read first), so a run that ``tacho verify`` refuses is never replayed as reproduced.
    """
    summary = run_summary(store, run_id, tenant=tenant)
    where = summary.tenant if summary is not None else tenant
    events: list[Event] = []
    failed: list[Exception] = []

    def read() -> Iterator[Event]:
        # A read that fails is raised as it is, as before the events were checked while
        # read (verify_run would report it as a damaged run).
        try:
            yield from store.read(run_id, tenant=where)
        except Exception as exc:
            failed.append(exc)

    with collector_paused():  # the whole run is held: see record/bulk.py
        # ``read`` decodes each payload with orjson.loads of its stored bytes: the check
        # reuses it. Each page is checked while the next is read (``overlap``): the run is
        # loaded in one process, with a core to spare on most machines.
        report = verify_run(
            read(), summary, source=store.url, decoded=True, keep=events, overlap=True
        )
    if failed:
        raise failed[0]
    return events, report


def verify_all(
    store: Store,
    *,
    tenant: str | None = None,
    progress: Callable[[int], None] | None = None,
    workers: int = 1,
    scans: Sequence[RowScan] = (),
) -> Iterator[VerifyReport]:
    """Verify every run of ``store`` (of one ``tenant``), one at a time, in constant memory.

    Orphaned events (a run without a summary) are verified too. ``progress`` is called with
    the number of events checked since its last call, at most every 1000 events. With
    ``workers`` above 1 the runs of a SQLite file are spread over that many processes (large
    runs in chunks, see :mod:`tachograph.store.parallel`): the same reports, in the same order.
    ``scans`` read each run's rows as :func:`verify_stored` has them read.
    """
    if workers > 1:
        from .parallel import verify_all_parallel

        yield from verify_all_parallel(
            store, tenant=tenant, workers=workers, progress=progress, scans=scans
        )
        return
    for run_tenant, run_id in store.run_keys():
        if tenant is not None and run_tenant != tenant:
            continue
        yield verify_stored(store, run_id, tenant=run_tenant, progress=progress, scans=scans)
