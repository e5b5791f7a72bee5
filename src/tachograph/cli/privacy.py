"""``tacho erase``, ``tacho audit``, ``tacho retention plan|apply`` and the ``--purpose`` option.

See docs/privacy.md. Every read command that shows payloads takes ``--purpose`` through
:func:`purpose_option` and reads through :func:`scoped_store`, so that the read is checked
against the purpose policy and recorded in the store audit.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..errors import PrivacyError, RecordingError, RunNotFound
from ..lifecycle.audit import ACTIONS, action_matches, current_actor, list_audit, verify_audit
from ..lifecycle.blobs import BlobStore
from ..lifecycle.erasure import erase, subject_id
from ..lifecycle.purpose import DEFAULT_PURPOSE, ScopedStore, policy_in_force, scoped
from ..lifecycle.retention import DEFAULT_RETENTION, RetentionPlan, apply, load_policy, plan
from ..lifecycle.times import shift
from ..record.event import now_ts
from ..store import Store
from .app import (
    EXIT_FAILED,
    EXIT_USAGE,
    LIMIT,
    CliError,
    emit_json,
    json_option,
    open_store,
    resolve_run,
)
from .render import Output

__all__ = ["purpose_option", "register", "scoped_store"]

F = TypeVar("F", bound=Callable[..., Any])


def purpose_option(fn: F) -> F:
    """Add ``--purpose NAME`` (parameter ``purpose``): why payloads are read (default
    ``debug``; the policy is ``TACHOGRAPH_PURPOSE_POLICY`` or the built-in one)."""
    return click.option(
        "--purpose",
        "purpose",
        default=DEFAULT_PURPOSE,
        show_default=True,
        envvar="TACHOGRAPH_PURPOSE",
        metavar="NAME",
        help="Why you read payloads (debug, audit, replay, metrics, or one of the purpose "
        "policy's); the read is recorded in the store audit. Env: TACHOGRAPH_PURPOSE.",
    )(fn)


def scoped_store(store: Store, purpose: str, *, whole_events: bool = False) -> ScopedStore:
    """``store`` seen through ``purpose`` under the policy in force."""
    return scoped(store, purpose, policy=policy_in_force(), whole_events=whole_events)


def _by_option(fn: F) -> F:
    return click.option(
        "--by",
        "by",
        metavar="NAME",
        default=None,
        help="Who acts, for the store audit. Default: TACHOGRAPH_ACTOR, else the system user.",
    )(fn)


# -- erase --------------------------------------------------------------------------------


@click.command("erase", short_help="Erase payloads (the chain still verifies).")
@click.argument("run_id", metavar="[RUN]", required=False)
@click.option(
    "--seq",
    "seqs",
    type=click.IntRange(min=0),
    multiple=True,
    metavar="N",
    help="Erase the payload at this seq (repeatable).",
)
@click.option(
    "--type",
    "types",
    multiple=True,
    metavar="T",
    help="Erase payloads of this event type; patterns such as 'model.*' (repeatable).",
)
@click.option(
    "--subject",
    metavar="ID",
    help="Erase every event linked to this data subject (in RUN, or in every run), "
    "and those runs' run.started payloads.",
)
@click.option(
    "--tenant",
    help="The tenant of the run or subject (default: the run's, or 'default' for a subject).",
)
@click.option(
    "--reason", required=True, metavar="TEXT", help="Why (required; recorded in the store audit)."
)
@_by_option
@json_option
def erase_cmd(
    run_id: str | None,
    seqs: tuple[int, ...],
    types: tuple[str, ...],
    subject: str | None,
    tenant: str | None,
    reason: str,
    by: str | None,
    as_json: bool,
) -> None:
    """Erase payloads and salts (SPEC section 4) of a run's events, chosen by --seq and
    --type (all of them when neither is given), or of a data subject's events with --subject.

    The chain still verifies and reports the seqs as erased; replay reports them as
    unreplayable. Each erasure is recorded in the store audit (who, when, why, which events),
    and the plaintext is removed from the database file, its -wal and its free pages.
    Erasing again is harmless (nothing more is erased or recorded).
    """
    if run_id is None and subject is None:
        raise click.UsageError("name a RUN, a --subject, or both")
    if not reason.strip():
        raise click.BadParameter("must not be empty", param_hint="--reason")
    if subject is not None:
        try:
            subject = subject_id(subject)
        except RecordingError as exc:  # empty, or not Unicode: a bad value, as --reason's
            raise click.BadParameter(str(exc), param_hint="--subject") from None
    with open_store() as store:
        target = None
        if run_id is not None:
            info = resolve_run(store, run_id, tenant=tenant)
            target, tenant = info.run_id, info.tenant
        try:
            report = erase(
                store,
                target,
                reason=reason,
                seqs=seqs,
                types=types,
                subject=subject,
                tenant=tenant,
                actor=by,
            )
        except RunNotFound as exc:
            if exc.seq is None:
                raise
            # the run is there, the seq is not: a usage error, as tacho state --at says it
            raise CliError(str(exc), exit_code=EXIT_USAGE) from exc
        except PrivacyError as exc:
            # the key the subject's links need is not configured: the environment is how the
            # command was asked for, as a missing policy file is (exit 2); nothing was erased
            raise CliError(str(exc), exit_code=EXIT_USAGE) from exc
    if as_json:
        emit_json(report.to_dict())
        return
    out = Output()
    if not report.runs:
        out.line(
            f"no events are linked to subject {subject!r} (as given, or as its token under a "
            "configured key) in tenant "
            f"{tenant or store.tenant or 'default'!r}; nothing erased"
        )
        return
    for run in report.runs:
        already = len(run.seqs) - run.erased
        note = f" ({already} already erased)" if already else ""
        seqs_text = ", ".join(map(str, run.seqs)) or "none"
        blobs = f" and {run.blobs} blob(s) they referenced" if run.blobs else ""
        out.line(f"{run.run_id}: erased {run.erased} payload(s) at seq {seqs_text}{note}{blobs}")
    out.line(f"{report.erased} payload(s) erased by {report.actor}: {reason}", style="bold")


# -- audit --------------------------------------------------------------------------------


@click.command("audit", short_help="List and verify the store audit.")
@click.option("--tenant", help="Only records of this tenant.")
@click.option(
    "--action",
    metavar="NAME",
    help="Only this action or family: erase, read, read.denied, retention, ...",
)
@click.option("--run", "run_id", metavar="RUN", help="Only records about this run.")
@click.option(
    "--limit",
    type=LIMIT,
    default=0,
    show_default=True,
    help="Only the newest this many records (0: all).",
)
@json_option
def audit_cmd(
    tenant: str | None, action: str | None, run_id: str | None, limit: int, as_json: bool
) -> None:
    """List the store audit (erasures, deletions, retention, purpose-scoped reads), oldest
    first, and verify its hash chain. Exits 1 if the chain does not verify."""
    with open_store() as store:
        report = verify_audit(store)
        records = list_audit(store, tenant=tenant, action=action, run_id=run_id, limit=limit)
        if action is not None and not records:
            _known_action(store, action, store.scoped_tenant(tenant))
    if as_json:
        emit_json({"verify": report.to_dict(), "records": [r.to_dict() for r in records]})
    else:
        out = Output()
        rows = []
        for r in records:
            what = ", ".join(
                f"{k}={v}" for k, v in sorted(r.detail.items()) if k not in ("policy",)
            )
            rows.append(
                (str(r.seq), r.ts[:19].replace("T", " "), r.actor, r.tenant, r.action, what)
            )
        if rows:
            out.table(("SEQ", "TIME", "BY", "TENANT", "ACTION", "DETAIL"), rows)
        else:
            filtered = any(v is not None for v in (tenant, action, run_id))
            out.line("no audit records" + (" match these filters" if filtered else ""))
        for line in report.render().splitlines():  # each problem a line, each line escaped
            out.line(line, style="green" if report.ok else "bold red")
    if not report.ok:
        sys.exit(EXIT_FAILED)


def _known_action(store: Store, action: str, tenant: str | None) -> None:
    """Refuse an ``--action`` that names neither an action of this library (or a family of
    them) nor one a record of this store (of ``tenant``, when given) holds: a typo would read
    as "nothing happened"."""
    if any(action_matches(known, action) for known in ACTIONS):
        return
    if any(
        action_matches(record.action, action) and tenant in (None, record.tenant)
        for record in store.read_audit()
    ):
        return
    raise CliError(
        f"unknown audit action {action!r}: the actions are {', '.join(ACTIONS)}, and "
        "'read' or 'retention' take their family",
        exit_code=EXIT_USAGE,
    )


# -- retention ----------------------------------------------------------------------------


@click.group("retention", short_help="Plan and apply the retention policy.")
def retention_group() -> None:
    """Retention: erase payloads past their window, delete runs past theirs, expire blobs."""


def _retention_options(fn: F) -> F:
    fn = click.option("--tenant", help="Only runs of this tenant.")(fn)
    fn = click.option(
        "--now", "now", metavar="TIME", help="Plan as of this ISO 8601 time (default: now)."
    )(fn)
    fn = click.option(
        "--policy",
        "policy_path",
        metavar="FILE",
        envvar="TACHOGRAPH_RETENTION_POLICY",
        type=click.Path(dir_okay=False),
        help="The retention policy (TOML). Default: TACHOGRAPH_RETENTION_POLICY, else the "
        "built-in policy (docs/privacy.md).",
    )(fn)
    return fn


def _plan(
    store: Store, policy_path: str | None, now: str | None, tenant: str | None
) -> RetentionPlan:
    from .commands_inspect import as_timestamp

    policy = load_policy(policy_path) if policy_path else DEFAULT_RETENTION
    blobs = BlobStore.beside(store) if hasattr(store, "path") else None
    return plan(store, policy, now=as_timestamp(now, "--now"), tenant=tenant, blobs=blobs)


def _show_plan(out: Output, retention: RetentionPlan, *, done: bool = False) -> None:
    out.line(f"retention as of {retention.now} (policy: {retention.source})", style="bold")
    rows = []
    for run in retention.runs:
        if run.action == "hold":
            rows.append((run.run_id, "hold", "*", "-", run.reason or ""))
            continue
        verb = "delete" if run.action == "delete" else "erase"
        for type_, count in run.counts.items():
            rows.append((run.run_id, verb, type_, str(count), ""))
        for type_, count in run.floor_kept.items():
            rows.append((run.run_id, "keep", type_, str(count), "audit floor"))
    if rows:
        out.table(("RUN", "ACTION", "TYPE", "COUNT", "NOTE"), rows)
    for blob in retention.blobs:
        out.line(f"  blob {blob.digest} expired at {blob.expires}")
    for override in retention.overrides:
        out.line(
            f"  override: audit floor {override.floor / 86400:g} days for "
            f"{', '.join(override.types)}: {override.reason}",
            style="yellow",
        )
    t = retention.totals()
    out.line(
        f"{'done' if done else 'would'}: erase {t['erase_payloads']} payload(s), delete "
        f"{t['delete_runs']} run(s) ({t['delete_events']} events), {t['expired_blobs']} "
        f"expired blob(s); {t['floor_kept']} kept by the audit floor, {t['held_runs']} run(s) "
        "on hold",
        style="bold",
    )


@retention_group.command("plan", short_help="Show what retention would erase and delete.")
@_retention_options
@json_option
def plan_cmd(policy_path: str | None, now: str | None, tenant: str | None, as_json: bool) -> None:
    """Show what `tacho retention apply` would do: payloads to erase and runs to delete,
    counted per event type and run, and what the audit floor and legal holds keep."""
    with open_store() as store:
        retention = _plan(store, policy_path, now, tenant)
    if as_json:
        emit_json(retention.to_dict())
        return
    _show_plan(Output(), retention)


@retention_group.command("apply", short_help="Erase and delete what the policy says.")
@_retention_options
@_by_option
@json_option
def apply_cmd(
    policy_path: str | None, now: str | None, tenant: str | None, by: str | None, as_json: bool
) -> None:
    """Apply the retention policy: erase payloads past their window, delete whole runs past
    their run window (the only way runs are deleted), remove expired blobs. Every step is
    recorded in the store audit; applying twice does nothing more."""
    with open_store() as store:
        retention = _plan(store, policy_path, now, tenant)
        latest = shift(now_ts(), _APPLY_SKEW)
        if latest is not None and retention.now > latest:
            # applied, a plan for a time to come deletes what the floor keeps today
            raise CliError(
                f"--now {now} is later than now: a plan for a time to come can be shown "
                "(tacho retention plan --now), not applied",
                exit_code=EXIT_USAGE,
            )
        blobs = BlobStore.beside(store) if hasattr(store, "path") else None
        done = apply(store, retention, actor=by or current_actor(), blobs=blobs)
    if as_json:
        emit_json({"plan": retention.to_dict(), "done": done})
        return
    _show_plan(Output(), retention, done=True)


_APPLY_SKEW = 300.0
"""Seconds ``retention apply --now`` may run ahead of this machine's clock (its skew)."""


def register(cli: click.Group) -> None:
    """Add ``erase``, ``audit`` and ``retention`` to ``cli``."""
    for command in (erase_cmd, audit_cmd, retention_group):
        cli.add_command(command)
