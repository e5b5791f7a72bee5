"""Sealing commands (SPEC section 9): ``keys init``, ``seal``, ``witness``, ``evidence``, and
the sealing half of ``verify`` (per-run verdicts on a store; evidence folders)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import EventError, SealingError, TachographError
from ..record.checkpoint import COSIGNATURE, SIGNATURE, Checkpoint, Note, SigningKey, VerifierKey
from ..record.event import check_tenant
from ..record.verify import VerifyReport
from ..store import Store
from ..views.text import escape
from .app import (
    EXIT_FAILED,
    EXIT_STORE,
    EXIT_USAGE,
    CliError,
    emit_json,
    json_option,
    open_store,
    state,
)
from .privacy import purpose_option

if TYPE_CHECKING:
    from ..sealing import TenantAudit

__all__ = [
    "orphan_seal_problems",
    "parse_keys",
    "register",
    "seal_verdicts",
    "tenant_audits",
    "verify_evidence_dir",
]


def parse_keys(values: Sequence[str], option: str = "--key") -> list[VerifierKey]:
    """Verifier keys from option values: a key string, or a file of key lines (a signing key
    file gives its public half); errors name ``option``."""
    keys: list[VerifierKey] = []
    for value in values:
        path = Path(value)
        lines = path.read_text().splitlines() if path.is_file() else [value]
        for line in lines:
            if not line.strip():
                continue
            try:
                if line.startswith("PRIVATE+KEY+"):
                    keys.append(SigningKey.parse(line).verifier)
                else:
                    keys.append(VerifierKey.parse(line))
            except SealingError as exc:
                raise CliError(f"{option} {value}: {exc}", exit_code=EXIT_USAGE) from exc
    return keys


def _default_keys() -> list[VerifierKey]:
    from ..sealing.log import load_signing_key

    try:
        key = load_signing_key()
    except SealingError:
        return []
    return [key.verifier] if key is not None else []


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


@click.group("keys", short_help="Make signing keys for checkpoints.")
def keys_group() -> None:
    """Signing keys for checkpoints (log keys) and cosignatures (witness keys)."""


@keys_group.command("init", short_help="Make a signing key file; print its verifier key.")
@click.option(
    "-o",
    "--out",
    "--output",  # the name export gives it
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Key file to create (mode 0600). Default: TACHOGRAPH_SIGNING_KEY.",
)
@click.option("--name", default=None, help="Key name (host-like). Default: the log origin's host.")
@click.option("--witness", "for_witness", is_flag=True, help="A witness (cosignature) key.")
@json_option
def keys_init(out: Path | None, name: str | None, for_witness: bool, as_json: bool) -> None:
    """Create a new Ed25519 key in a file of its own (never inside the store's folder) and
    print the verifier key that auditors and witnesses trust."""
    from ..record.checkpoint import generate_key
    from ..sealing.log import DEFAULT_LOG_NAME, LOG_NAME_ENV, SIGNING_KEY_ENV

    target = out or (Path(os.environ[SIGNING_KEY_ENV]) if os.environ.get(SIGNING_KEY_ENV) else None)
    if target is None:
        raise click.UsageError(f"give --out PATH (or set {SIGNING_KEY_ENV})")
    from ..store.sqlite import sqlite_file_of

    # the file the store in force is opened at (a sqlite:/// URL resolved as opening it
    # resolves it, its ?tenant= left out), whether given by --store or TACHOGRAPH_STORE
    store_path = sqlite_file_of(state().store_url)
    if store_path is not None and _inside(target, store_path.parent):
        raise CliError(
            f"{target} is inside the store's folder {store_path.parent.resolve()}: a signing key "
            "must live apart from the store it vouches for",
            exit_code=EXIT_USAGE,
        )
    default = (os.environ.get(LOG_NAME_ENV) or DEFAULT_LOG_NAME) + (
        "/witness" if for_witness else "/tachograph"
    )
    try:
        key = generate_key(name or default, kind=COSIGNATURE if for_witness else SIGNATURE)
    except SealingError as exc:
        raise CliError(f"--name {name!r}: {exc}", exit_code=EXIT_USAGE) from None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if not target.parent.is_dir():
            raise CliError(
                f"cannot write {target}: {target.parent} is not a folder", exit_code=EXIT_USAGE
            ) from None
        raise CliError(
            f"{target} exists; refusing to overwrite a key", exit_code=EXIT_USAGE
        ) from None
    except OSError as exc:
        raise CliError(
            f"cannot write {target}: {exc.strerror or exc}", exit_code=EXIT_USAGE
        ) from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key.encode() + "\n")
            f.flush()
            os.fsync(f.fileno())
    except BaseException as exc:
        # a part of a key is no key, and would refuse the next try ("exists")
        target.unlink(missing_ok=True)
        if not isinstance(exc, OSError):
            raise
        raise CliError(
            f"cannot write the key {target}: {exc.strerror or exc}", exit_code=EXIT_USAGE
        ) from None
    data = {"key_file": str(target), "name": key.name, "verifier_key": str(key.verifier)}
    if as_json:
        emit_json(data)
    else:
        click.echo(str(key.verifier))


@click.command("seal", short_help="Issue a checkpoint over the seals waiting for one.")
@click.option(
    "--tenant", default=None, help="The tenant (default: the store's ?tenant=, else 'default')."
)
@click.option("--key-file", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--witness", "witnesses", multiple=True, help="Witness URL or directory to push to.")
@json_option
def seal_cmd(
    tenant: str | None, key_file: str | None, witnesses: tuple[str, ...], as_json: bool
) -> None:
    """Sign and keep a checkpoint of TENANT's seal log (with the key in --key-file or
    TACHOGRAPH_SIGNING_KEY), and push it to the witnesses."""
    from ..record.checkpoint import Checkpoint
    from ..sealing import SealLog, load_signing_key, witness_for

    try:
        key = load_signing_key(key_file)
    except SealingError as exc:  # a file or variable that holds no signing key: usage (2)
        where = f"--key-file {key_file}" if key_file else "TACHOGRAPH_SIGNING_KEY"
        raise CliError(f"{where}: {exc}", exit_code=EXIT_USAGE) from exc
    if key is None:
        raise click.UsageError("give --key-file or set TACHOGRAPH_SIGNING_KEY")
    if tenant is not None:
        try:
            check_tenant(tenant)
        except EventError as exc:
            raise CliError(f"--tenant: {exc}", exit_code=EXIT_USAGE) from None
    with open_store() as store:
        name = store.writing_tenant(tenant)
        if store.seal_count(name) == 0 and store.latest_checkpoint(name) is None:
            # Nothing to sign: a checkpoint of an empty log, once kept, is kept for good (a
            # mistyped --tenant would leave one behind) and vouches for nothing.
            runs = store.runs(tenant=name, limit=1)
            why = (
                "its runs have no seal (recorded with sealing off, or not yet at their first)"
                if runs
                else "the store holds no run of it (tacho runs lists each run's tenant)"
            )
            raise CliError(
                f"tenant {name!r} has no seal and no checkpoint in this store: nothing to "
                f"seal, and no checkpoint was signed; {why}",
                exit_code=EXIT_STORE,
            )
        log = SealLog(
            store,
            tenant=name,
            key=key,
            witnesses=[witness_for(w, log_keys=[key.verifier]) for w in witnesses],
        )
        # With no seal waiting, no checkpoint is signed: the latest one is pushed instead.
        note = log.issue()
    cp = Checkpoint.parse(note.text)
    cosigned = log.cosigned or note
    cosigners = [s.name for s in cosigned.signatures if s not in note.signatures]
    data = {
        "origin": cp.origin,
        "size": cp.size,
        "issued": log.issued_new,
        "checkpoint": cosigned.to_bytes().decode(),
        "cosigned_by": cosigners,
        "witness_errors": log.witness_errors,
    }
    if as_json:
        emit_json(data)
    else:
        latest = "" if log.issued_new else " (the latest: no seal waited for a new one)"
        click.echo(escape(f"checkpoint {cp.origin} size {cp.size}{latest}"))
        if witnesses:
            accepted = len(witnesses) - len(log.witness_errors)
            named = f", cosigned by {', '.join(cosigners)}" if cosigners else ", no cosignature"
            click.echo(escape(f"accepted by {accepted} of {len(witnesses)} witness(es){named}"))
        for error in log.witness_errors:
            # a witness's refusal quotes what it answered: untrusted text, escaped
            click.echo(f"witness: {escape(error)}", err=True)
    if log.witness_errors:
        sys.exit(EXIT_FAILED)


@click.command("witness", short_help="Run a witness over HTTP on 127.0.0.1.")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False))
@click.option("--key-file", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--log-key", "log_keys", multiple=True, required=True, help="Trusted log key.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--port", default=0, type=click.IntRange(0, 65535), help="Port (default: any free one)."
)
@json_option
def witness_cmd(
    directory: str, key_file: str, log_keys: tuple[str, ...], host: str, port: int, as_json: bool
) -> None:
    """Keep the latest checkpoint of each trusted log in DIR and cosign only consistent
    growth (c2sp.org/tlog-witness add-checkpoint); refuse forks and equivocation."""
    from ..sealing.witness import Witness, serve

    try:
        key = SigningKey.load(key_file)
    except SealingError as exc:
        raise CliError(f"--key-file {key_file}: {exc}", exit_code=EXIT_USAGE) from exc
    witness = Witness(directory, log_keys=parse_keys(log_keys, "--log-key"), key=key)
    server = serve(witness, host=host, port=port)
    bound_host, bound_port = server.server_address[:2]
    url = f"http://{bound_host!s}:{bound_port}"
    if as_json:
        emit_json({"url": url, "verifier_key": str(key.verifier), "dir": directory})
    else:
        click.echo(f"witness {key.name} listening on {url}")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:  # pragma: no cover - interactive
        pass
    finally:
        server.server_close()


@click.command("evidence", short_help="Write a run's offline evidence bundle.")
@click.argument("run_id", metavar="RUN")
@click.option("-o", "--out", "--output", "out", required=True, type=click.Path(file_okay=False))
@click.option("--key", "keys", multiple=True, help="Verifier key(s) to list in the bundle.")
@click.option(
    "--witness", default=None, help="Witness URL or directory holding a cosigned checkpoint."
)
@click.option(
    "--witness-key", "witness_keys", multiple=True, help="Witness verifier key(s) to list."
)
@click.option("--tenant", help="The run's tenant, if its id exists under several.")
@purpose_option
@json_option
def evidence_cmd(
    run_id: str,
    out: str,
    keys: tuple[str, ...],
    witness: str | None,
    witness_keys: tuple[str, ...],
    tenant: str | None,
    purpose: str,
    as_json: bool,
) -> None:
    """Write RUN's lines, its tlog-proof, the checkpoint and the verifier keys into OUT."""
    from ..sealing import origin_for, witness_for, write_evidence
    from .app import resolve_run
    from .privacy import scoped_store

    log_keys = parse_keys(keys) or _default_keys()
    wkeys = parse_keys(witness_keys)
    with open_store() as store:
        info = resolve_run(store, run_id, tenant=tenant)
        note = None
        if witness is not None:
            # Asked for a witness's checkpoint: never fall back to the store's uncosigned one.
            origin = origin_for(info.tenant)
            note = witness_for(witness, log_keys=log_keys, create=False).latest(origin)
            if note is None:
                raise CliError(
                    f"the witness {witness} holds no checkpoint of {origin}: no evidence written",
                    hints=[f"Push the latest checkpoint to it: tacho seal --witness {witness}"],
                )
        try:
            # the run's lines are read as an export reads them: for a purpose, recorded in the
            # store audit, whole events only (a bundle must verify)
            path = write_evidence(
                scoped_store(store, purpose, whole_events=True),
                info.run_id,
                out,
                tenant=info.tenant,
                verifier_keys=[*log_keys, *wkeys],
                witness_note=note,
                witness_keys=wkeys,
            )
        except OSError as exc:  # a folder under a file, a device, a full disk
            raise CliError(
                f"cannot write the evidence to {out}: {exc.strerror or exc}",
                exit_code=EXIT_USAGE,
            ) from None
        # The bundle is written whatever it shows (it is the evidence), but a run that does
        # not verify, or whose seals show it was changed, is named, as export names it.
        problems: list[str] = []
        report = store.verify(info.run_id, tenant=info.tenant)
        # A payload the purpose may not read reads in the bundle as an erased one: say which
        # ones were withheld, so that whoever hands the bundle over can tell the auditor.
        withheld = _withheld(path, report.erased)
        if not report.ok:
            problems.append(f"TAMPERED: {report.render()}")
        else:
            verdict = seal_verdicts(
                store,
                [report],
                keys=keys,
                witnesses=(witness,) if witness is not None else (),
                witness_keys=witness_keys,
            ).get((info.tenant, info.run_id))
            if verdict is not None and not verdict.ok:
                problems.append(f"SEAL FAILED: {verdict.reason}")
    if as_json:
        emit_json(
            {
                "run_id": info.run_id,
                "directory": str(path),
                "ok": not problems,
                "problems": problems,
                "withheld": withheld,
            }
        )
    else:
        click.echo(escape(f"evidence for {info.run_id} written to {path}"))
        if withheld:
            shown = ", ".join(str(seq) for seq in withheld[:10]) + (
                ", ..." if len(withheld) > 10 else ""
            )
            click.echo(
                f"note: {len(withheld)} payload(s) withheld for purpose {escape(purpose)} "
                f"(seq {shown}): the bundle reads them as erased",
                err=True,
            )
        for problem in problems:
            click.echo(escape(problem), err=True)
    if problems:
        sys.exit(EXIT_FAILED)


def _withheld(folder: Path, erased: Sequence[int]) -> list[int]:
    """The seqs whose payloads the bundle in ``folder`` lacks though the store has them."""
    from ..record.jsonl import verify_jsonl
    from ..sealing.evidence import RUN_FILE

    try:
        reports = verify_jsonl(folder / RUN_FILE)
    except (OSError, TachographError):
        return []
    kept = set(erased)
    return sorted(seq for r in reports for seq in r.erased if seq not in kept)


def verify_evidence_dir(
    directory: Path,
    keys: Sequence[str],
    witness_keys: Sequence[str],
    min_witnesses: int,
    as_json: bool,
) -> None:
    """``tacho verify DIR``: check an evidence folder offline, exit 1 if anything fails."""
    from ..sealing import verify_evidence

    report = verify_evidence(
        directory,
        keys=parse_keys(keys) or _default_keys(),  # as for a store: the documented default
        witness_keys=parse_keys(witness_keys),
        min_witnesses=min_witnesses,
    )
    if as_json:
        emit_json(report.to_dict())
    else:
        # a bundle comes from elsewhere: its keys, names and signer lines are untrusted text
        click.echo(escape(report.render(), newlines=True))
    if not report.ok:
        sys.exit(EXIT_FAILED)


def seal_verdicts(
    store: Store,
    reports: Sequence[VerifyReport],
    *,
    keys: Sequence[str] = (),
    witnesses: Sequence[str] = (),
    witness_keys: Sequence[str] = (),
) -> dict[tuple[str | None, str | None], Any]:
    """The sealing verdict of each verified run, by ``(tenant, run_id)``."""
    from ..sealing import run_verdict

    tenants = sorted({r.tenant for r in reports if r.tenant is not None and r.run_id is not None})
    audits = tenant_audits(
        store, tenants, keys=keys, witnesses=witnesses, witness_keys=witness_keys
    )
    verdicts: dict[tuple[str | None, str | None], Any] = {}
    for report in reports:
        if report.tenant is None or report.run_id is None:
            continue
        info = store.run_info(report.run_id, tenant=report.tenant)
        verdicts[(report.tenant, report.run_id)] = run_verdict(store, info, audits[report.tenant])
    return verdicts


def tenant_audits(
    store: Store,
    tenants: Sequence[str],
    *,
    keys: Sequence[str] = (),
    witnesses: Sequence[str] = (),
    witness_keys: Sequence[str] = (),
    listed: Mapping[str, Sequence[Note]] | None = None,
) -> dict[str, TenantAudit]:
    """Each tenant's seal log held against the trusted ``keys`` and the ``witnesses`` (and
    the checkpoints ``listed`` for it, those a witness listed)."""
    from ..sealing import audit_tenant, origin_for

    trusted = parse_keys(keys) or _default_keys()
    wkeys = parse_keys(witness_keys)
    audits: dict[str, TenantAudit] = {}
    for tenant in tenants:
        notes: list[Note] = list((listed or {}).get(tenant, ()))
        for target in witnesses:
            # here: the witness module brings an HTTP client and server (about 20 ms), which
            # a verification that names no witness does without
            from ..sealing import witness_for

            try:  # reading a witness never makes one: a mistyped DIR is an error
                witness = witness_for(target, log_keys=trusted, create=False)
            except SealingError as exc:
                raise CliError(f"--witness {target}: {exc}", exit_code=EXIT_USAGE) from exc
            held = witness.latest(origin_for(tenant))
            if held is not None:
                notes.append(held)
        audits[tenant] = audit_tenant(
            store, tenant, keys=trusted, witness_notes=notes, witness_keys=wkeys
        )
    return audits


def orphan_seal_problems(
    store: Store,
    reports: Sequence[VerifyReport],
    *,
    keys: Sequence[str] = (),
    witnesses: Sequence[str] = (),
    witness_keys: Sequence[str] = (),
) -> dict[str, str]:
    """``{tenant: problem}`` for the seal logs of tenants no verified run belongs to: when
    the store's owner removed every run of a tenant, its seals still name them; when the
    owner removed its seals and checkpoints too, a witness that lists the logs it holds
    (``tacho witness``) still names the tenant."""
    seen = {r.tenant for r in reports}
    others = [t for t in store.seal_tenants() if t not in seen]
    listed = _listed_by_witnesses(witnesses, keys=keys, witness_keys=witness_keys)
    others += sorted(t for t in listed if t not in seen and t not in others)
    audits = tenant_audits(
        store, others, keys=keys, witnesses=witnesses, witness_keys=witness_keys, listed=listed
    )
    return {t: a.problem for t, a in audits.items() if a.problem is not None}


def _listed_by_witnesses(
    witnesses: Sequence[str], *, keys: Sequence[str], witness_keys: Sequence[str]
) -> dict[str, list[Note]]:
    """The checkpoints each witness lists, by the tenant their origin names, of those a
    trusted log key signed or a trusted witness key cosigned (others are no evidence)."""
    if not witnesses:
        return {}
    from ..record.checkpoint import verify_cosignature
    from ..sealing import origin_for, witness_for

    trusted = parse_keys(keys) or _default_keys()
    wkeys = parse_keys(witness_keys)
    found: dict[str, list[Note]] = {}
    for target in witnesses:
        try:
            witness = witness_for(target, log_keys=trusted, create=False)
            notes = witness.held()
        except SealingError as exc:
            raise CliError(f"--witness {target}: {exc}", exit_code=EXIT_USAGE) from exc
        for note in notes:
            try:
                origin = Checkpoint.parse(note.text).origin
                vouched = bool(trusted and note.verified_by(trusted)) or any(
                    verify_cosignature(note, k) is not None for k in wkeys
                )
            except SealingError:
                continue
            _name, sep, tenant = origin.rpartition("/tachograph/")
            # this log's: the origin this verifier names for that tenant (the log name of
            # TACHOGRAPH_LOG_NAME, else the default); another log name is another log
            if vouched and sep and tenant and origin == origin_for(tenant):
                found.setdefault(tenant, []).append(note)
    return found


def register(group: click.Group) -> None:
    """Add the sealing commands to ``group``."""
    for command in (keys_group, seal_cmd, witness_cmd, evidence_cmd):
        group.add_command(command)
