"""Evidence bundles: one run, provably logged, checkable offline with nothing but the folder.

A bundle is a folder with

- ``run.jsonl``: the run's lines (SPEC section 4);
- ``run.tlog-proof``: a c2sp.org/tlog-proof@v1 file whose ``extra`` is the seal leaf, then
  the leaf's index, its inclusion path and the checkpoint (with any cosignatures);
- ``checkpoint``: that checkpoint alone, as a signed note;
- ``verifier.keys``: the verifier keys of the log and of the witnesses, one a line. They say
  which keys to expect; trust comes from the keys the auditor passes to :func:`verify_evidence`.

:func:`verify_evidence` follows SPEC section 9 "Evidence" step by step and names what failed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FormatError, SealingError
from ..record.checkpoint import (
    COSIGNATURE_BYTES,
    Checkpoint,
    Note,
    TlogProof,
    VerifierKey,
    verify_cosignature,
)
from ..record.event import EventType
from ..record.files import make_private_dirs, write_whole
from ..record.jsonl import export_run, verify_jsonl
from ..record.merkle import ProofError, SealLeaf, leaf_hash, verify_inclusion
from ..store.base import Store
from .log import SealLog

__all__ = ["EvidenceReport", "verify_evidence", "write_evidence"]

RUN_FILE = "run.jsonl"
PROOF_FILE = "run.tlog-proof"
CHECKPOINT_FILE = "checkpoint"
KEYS_FILE = "verifier.keys"


def write_evidence(
    store: Store,
    run_id: str,
    directory: str | os.PathLike[str],
    *,
    tenant: str | None = None,
    verifier_keys: Sequence[VerifierKey] = (),
    witness_note: Note | None = None,
    witness_keys: Sequence[VerifierKey] = (),
) -> Path:
    """Write the bundle of ``run_id`` into ``directory`` (created); returns its path.

    The proof is to the store's latest checkpoint, or to ``witness_note`` (a checkpoint a
    witness cosigned) when it is given. A ``witness_note`` must carry a cosignature (a valid
    one by a key of ``witness_keys``, when they are given) and cover the run's last seal
    under the store's latest checkpoint, else :class:`SealingError` is raised and nothing is
    written: a bundle asked for with a witness never falls back to an uncosigned checkpoint.
    """
    info = store.run_info(run_id, tenant=tenant)
    log = SealLog(store, tenant=info.tenant)
    row = store.latest_checkpoint(info.tenant)
    if row is None:
        raise SealingError(
            f"run {run_id!r} cannot be proven: its tenant's seal log has no checkpoint "
            "(seal with a signing key first)",
            what="checkpoint",
            run_id=run_id,
        )
    note = Note.parse(row.note)
    if witness_note is not None:
        _check_witness_note(store, info.tenant, info.run_id, note, witness_note, witness_keys)
        note = witness_note
    size = Checkpoint.parse(note.text).size
    seals = [s for s in store.seals_for_run(info.tenant, info.run_id) if s.index < size]
    if not seals:
        raise SealingError(
            f"run {run_id!r} has no seal under checkpoint {size}: it is unsealed",
            what="run",
            run_id=run_id,
        )
    seal = seals[-1]
    tree = log.tree(size)
    if tree.root() != Checkpoint.parse(note.text).root:
        raise SealingError(
            f"the store's seals do not hash to the root of checkpoint {size}", what="consistency"
        )
    proof = TlogProof(seal.index, tuple(tree.inclusion_proof(seal.index, size)), note, seal.leaf)
    out = Path(directory)
    # the run's payloads and its key secret: readable by the owner only, as the store is
    make_private_dirs(out)
    with write_whole(out / RUN_FILE) as f:
        export_run(store, info.run_id, f, tenant=info.tenant)
    for name, data in (
        (PROOF_FILE, proof.to_bytes()),
        (CHECKPOINT_FILE, note.to_bytes()),
        (KEYS_FILE, "".join(f"{k}\n" for k in verifier_keys).encode()),
    ):
        with write_whole(out / name) as f:
            f.write(data)
    return out


def _check_witness_note(
    store: Store,
    tenant: str,
    run_id: str,
    latest: Note,
    wnote: Note,
    witness_keys: Sequence[VerifierKey],
) -> None:
    """Raise unless ``wnote`` is a cosigned checkpoint of this log that covers the run's last
    seal under the store's ``latest`` checkpoint."""
    cp = Checkpoint.parse(latest.text)
    wcp = Checkpoint.parse(wnote.text)
    if wcp.origin != cp.origin:
        raise SealingError(
            f"the witness's checkpoint is for {wcp.origin!r}, not for this log ({cp.origin!r})",
            what="checkpoint",
            run_id=run_id,
        )
    if witness_keys:
        cosigners = [k.name for k in witness_keys if verify_cosignature(wnote, k) is not None]
        if not cosigners:
            names = ", ".join(k.name for k in witness_keys)
            raise SealingError(
                f"the witness's checkpoint {wcp.size} carries no cosignature by {names}",
                what="cosignature",
                run_id=run_id,
            )
    elif not any(len(s.signature) == COSIGNATURE_BYTES for s in wnote.signatures):
        raise SealingError(
            f"the witness's checkpoint {wcp.size} carries no cosignature (a witness with no "
            "cosigning key keeps checkpoints but does not cosign them)",
            what="cosignature",
            run_id=run_id,
        )
    count = store.seal_count(tenant)
    if wcp.size > count:
        raise SealingError(
            f"the witness holds checkpoint {wcp.size}, but the store's seal log holds only "
            f"{count} seal(s): it was cut or rewritten after the witness saw it",
            what="consistency",
            run_id=run_id,
        )
    under = [s for s in store.seals_for_run(tenant, run_id) if s.index < cp.size]
    if under and under[-1].index >= wcp.size:
        raise SealingError(
            f"the witness's checkpoint {wcp.size} does not cover run {run_id!r}'s last seal "
            f"(seq {under[-1].seq}, leaf {under[-1].index} of checkpoint {cp.size}): push the "
            "latest checkpoint to the witness first (tacho seal --witness URL|DIR)",
            what="witness",
            run_id=run_id,
        )


@dataclass(frozen=True, slots=True)
class EvidenceReport:
    """The outcome of :func:`verify_evidence`: each check in order, and the first failure."""

    directory: str
    checks: tuple[tuple[str, bool, str], ...]
    run_id: str | None = None
    sealed_seq: int | None = None
    events: int = 0
    checkpoint_size: int | None = None
    signed_by: str | None = None
    witnessed_by: tuple[str, ...] = ()
    erased: tuple[int, ...] = ()
    """The seqs whose payloads the bundle lacks (SPEC section 8, check 5: reported): erased
    in the store, or withheld from the bundle for the purpose it was written for
    (``tacho evidence --purpose``); the lines cannot tell which."""
    final: bool = False
    """Whether the seal is the run's end (its ``run.finished``): then every event is sealed."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def unsealed_events(self) -> int | None:
        """How many events come after the sealed one: no seal proves them (SPEC section 9,
        a verifier reports them as unsealed); ``None`` before the leaf was checked."""
        if self.sealed_seq is None:
            return None
        return max(0, self.events - 1 - self.sealed_seq)

    @property
    def ok(self) -> bool:
        """True when every check held."""
        return all(ok for _, ok, _ in self.checks)

    @property
    def failure(self) -> tuple[str, str] | None:
        """``(check, message)`` of the first failing check."""
        for name, ok, message in self.checks:
            if not ok:
                return name, message
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (documented in docs/cli.md)."""
        failure = self.failure
        return {
            "directory": self.directory,
            "ok": self.ok,
            "run_id": self.run_id,
            "events": self.events,
            "sealed_seq": self.sealed_seq,
            "final": self.final,
            "unsealed_events": self.unsealed_events,
            "checkpoint_size": self.checkpoint_size,
            "signed_by": self.signed_by,
            "witnessed_by": list(self.witnessed_by),
            "erased": list(self.erased),
            "checks": [{"check": n, "ok": ok, "message": m} for n, ok, m in self.checks],
            "failed_check": failure[0] if failure else None,
            "message": failure[1] if failure else None,
        }

    def render(self) -> str:
        """A paragraph a person can read."""
        if not self.ok:
            name, message = self.failure or ("", "")
            return f"evidence {self.directory}: FAILED ({name}): {message}"
        witnessed = (
            f", witnessed by {', '.join(self.witnessed_by)}"
            if self.witnessed_by
            # a checkpoint the log's key alone signed: whoever holds that key could have
            # signed another history as well (a witness's cosignature is what rules it out)
            else "; no trusted witness cosigned it, so the log's owner alone vouches for it"
        )
        after = self.unsealed_events or 0
        tail = (
            f"; {after} event(s) after it are not sealed: nothing proves them, the run's end "
            "included"
            if after > 0
            else ""
        )
        if self.erased:
            shown = ", ".join(str(s) for s in self.erased[:10])
            more = ", ..." if len(self.erased) > 10 else ""
            tail += (
                f"; {len(self.erased)} payload(s) not in the bundle (erased, or withheld for "
                f"the purpose it was written for) at seq {shown}{more}"
            )
        return (
            f"evidence {self.directory}: run {self.run_id} verified and sealed up to seq "
            f"{self.sealed_seq} (checkpoint of size {self.checkpoint_size}, signed by "
            f"{self.signed_by}{witnessed}){tail}"
        )


def verify_evidence(
    directory: str | os.PathLike[str],
    *,
    keys: Sequence[VerifierKey],
    witness_keys: Sequence[VerifierKey] = (),
    min_witnesses: int = 0,
) -> EvidenceReport:
    """Check a bundle against trusted log ``keys`` (and ``witness_keys``), offline."""
    folder = Path(directory)
    checks: list[tuple[str, bool, str]] = []
    facts: dict[str, Any] = {}

    def done() -> EvidenceReport:
        return EvidenceReport(str(folder), tuple(checks), **facts)

    def fail(name: str, message: str) -> EvidenceReport:
        checks.append((name, False, message))
        return done()

    # 1. the run (SPEC section 8)
    try:
        reports = verify_jsonl(folder / RUN_FILE)
        data = (folder / RUN_FILE).read_bytes()
    except FormatError as exc:
        return fail("run", str(exc))
    except OSError as exc:  # missing, a directory, unreadable
        return fail("run", f"cannot read {RUN_FILE}: {exc.strerror or exc}")
    if len(reports) != 1:
        return fail("run", f"{RUN_FILE} must hold exactly one run, it holds {len(reports)}")
    report = reports[0]
    facts.update(run_id=report.run_id, events=report.events, erased=tuple(report.erased))
    if not report.ok:
        first = report.first_failure
        where = f" at seq {first.seq}: {first.message}" if first else ""
        return fail("run", f"the run's chain does not verify{where}")
    lines = [json.loads(raw) for raw in data.splitlines() if raw.strip()]
    checks.append(("run", True, f"{report.events} events, chain intact"))
    # 2. the proof file and its leaf
    try:
        proof = TlogProof.parse((folder / PROOF_FILE).read_bytes())
        if proof.extra is None:
            raise SealingError("the proof has no extra line (the seal leaf)", what="proof")
        leaf = SealLeaf.from_bytes(proof.extra)
    except (OSError, SealingError) as exc:
        return fail("proof", str(exc))
    checks.append(("proof", True, f"{PROOF_FILE}: leaf {proof.index}"))
    # 3. the leaf names an event of this run, with exactly that hash
    if leaf.run_id != report.run_id or leaf.tenant != report.tenant:
        return fail(
            "leaf",
            f"the seal is for run {leaf.run_id!r} of tenant {leaf.tenant!r}, not for "
            f"{report.run_id!r} of {report.tenant!r}: a seal moved to another run",
        )
    if leaf.seq >= len(lines):
        return fail(
            "leaf",
            f"the run stops at seq {len(lines) - 1}, before the sealed seq {leaf.seq}: its tail "
            "was cut",
        )
    if lines[leaf.seq]["hash"] != leaf.hash:
        return fail(
            "leaf",
            f"the event at seq {leaf.seq} hashes to {lines[leaf.seq]['hash']}, but the seal "
            f"records {leaf.hash}: the run was changed before that point",
        )
    if leaf.final and lines[leaf.seq].get("type") != EventType.RUN_FINISHED.value:
        return fail(
            "leaf",
            f"the seal at seq {leaf.seq} says it is the run's end, but that event is "
            f"{lines[leaf.seq].get('type')!r}, not run.finished",
        )
    if leaf.final and len(lines) != leaf.seq + 1:
        return fail(
            "leaf",
            f"the final seal is at seq {leaf.seq}, but the run goes on to seq {len(lines) - 1}: "
            "events were appended after its end",
        )
    facts["sealed_seq"] = leaf.seq
    facts["final"] = leaf.final
    checks.append(("leaf", True, f"seq {leaf.seq} has the sealed hash"))
    # 4. the checkpoint is signed by a trusted key
    try:
        cp = Checkpoint.parse(proof.checkpoint.text)
        signers = proof.checkpoint.verified_by(list(keys))
    except SealingError as exc:
        return fail("signature", str(exc))
    facts["checkpoint_size"] = cp.size
    if not keys:
        return fail("signature", "no trusted verifier key was given")
    if not signers:
        names = ", ".join(sorted({s.name for s in proof.checkpoint.signatures})) or "nobody"
        return fail(
            "signature",
            f"the checkpoint is signed by {names}, with no key among the trusted ones "
            f"({', '.join(k.name + '+' + k.key_id.hex() for k in keys)})",
        )
    if not cp.origin.endswith(f"/tachograph/{leaf.tenant}"):
        return fail("signature", f"the checkpoint's origin {cp.origin!r} is not this tenant's log")
    # the bundle's checkpoint file is the proof's checkpoint: one that differs (or is missing)
    # would have a reader of the folder trust another tree than the one proven
    try:
        kept = Note.parse((folder / CHECKPOINT_FILE).read_bytes())
    except OSError:
        return fail("signature", f"the bundle has no {CHECKPOINT_FILE} file")
    except SealingError as exc:
        return fail("signature", f"{CHECKPOINT_FILE}: {exc}")
    if kept.text != proof.checkpoint.text:
        return fail(
            "signature",
            f"{CHECKPOINT_FILE} is not the checkpoint {PROOF_FILE} proves the run against",
        )
    facts["signed_by"] = signers[0].name
    checks.append(("signature", True, f"signed by {signers[0].name}"))
    # 5. the inclusion path leads from the leaf to the signed root
    try:
        verify_inclusion(proof.index, cp.size, leaf_hash(proof.extra), proof.path, cp.root)
    except ProofError as exc:
        return fail("inclusion", f"{exc} of checkpoint {cp.size}")
    checks.append(("inclusion", True, f"leaf {proof.index} is in the tree of size {cp.size}"))
    # 6. the cosignatures the policy asks for
    witnessed = []
    for wkey in witness_keys:
        try:
            if verify_cosignature(proof.checkpoint, wkey) is not None:
                witnessed.append(wkey.name)
        except SealingError as exc:
            return fail("witness", str(exc))
    facts["witnessed_by"] = tuple(witnessed)
    if len(witnessed) < min_witnesses:
        return fail(
            "witness", f"{len(witnessed)} valid cosignature(s), the policy asks for {min_witnesses}"
        )
    checks.append(("witness", True, f"{len(witnessed)} cosignature(s)"))
    return done()
