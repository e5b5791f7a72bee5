"""A tenant's seal log over a store: append seals, issue checkpoints, prove, audit.

Issuing a checkpoint starts from the latest one the store keeps: its signature must verify
with this log's key and the frontier kept beside it must lead to its root, or nothing is
issued (``never over an inconsistent tree``). The new tree is that frontier plus the leaves
appended since, so issuing costs O(log n + new leaves), however large the log is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import EventError, SealingError
from ..record.checkpoint import Checkpoint, Note, SigningKey, VerifierKey, verify_cosignature
from ..record.event import check_tenant
from ..record.merkle import (
    Frontier,
    ProofError,
    SealLeaf,
    Tree,
    consistency_from_frontier,
    leaf_hash,
    verify_consistency,
)
from ..store.base import SealRow, Store
from ..store.checkpoints import (
    DEFAULT_LOG_NAME,
    LOG_NAME_ENV,
    SIGNING_KEY_ENV,
    Issued,
    issue_checkpoint,
    latest_frontier,
    load_signing_key,
    origin_for,
)

_ORIGIN = re.compile(r"[!-~]+")
"""An origin line: printable ASCII, no space (the signed note's first line)."""

__all__ = [
    "DEFAULT_LOG_NAME",
    "LOG_NAME_ENV",
    "SIGNING_KEY_ENV",
    "SealLog",
    "TenantAudit",
    "audit_tenant",
    "load_signing_key",
    "origin_for",
]


class SealLog:
    """One tenant's seal log in ``store``, signing checkpoints with ``key`` when given.

    Without a key, seals are still appended (they wait for a checkpoint that a holder of the
    key issues later, with ``tacho seal checkpoint``), and no checkpoint is issued.
    ``witnesses`` receive each new checkpoint (see :mod:`tachograph.sealing.witness`).
    """

    def __init__(
        self,
        store: Store,
        *,
        tenant: str = "default",
        key: SigningKey | None = None,
        log_name: str | None = None,
        witnesses: Sequence[Any] = (),
    ) -> None:
        self.store = store
        # The origin is the first line of every checkpoint this log signs: a tenant or a log
        # name holding a newline would have the key sign lines of the caller's choosing.
        try:
            self.tenant = check_tenant(tenant)
        except EventError as exc:
            raise SealingError(f"cannot keep a seal log: {exc}") from None
        self.key = key
        self.origin = origin_for(tenant, log_name)
        if not _ORIGIN.fullmatch(self.origin):
            raise SealingError(
                f"log name in origin {self.origin!r} must be printable ASCII, with no space"
            )
        self.witnesses = list(witnesses)
        self.cosigned: Note | None = None
        """The latest checkpoint with the cosignatures the witnesses returned."""
        self.witness_errors: list[str] = []
        """Every refusal or failure of a witness, in order (a witness is never fatal)."""
        self.issued_new = False
        """Whether the last :meth:`issue` signed a new checkpoint (else it returned the latest)."""
        self._issued: Issued | None = None

    def append(self, leaves: Sequence[SealLeaf]) -> int:
        """Append seals (no checkpoint); the first one's index."""
        for leaf in leaves:
            if leaf.tenant != self.tenant:
                raise SealingError(
                    f"a seal of tenant {leaf.tenant!r} in the log of {self.tenant!r}", what="leaf"
                )
        self._refuse_conflicts(leaves)
        rows = [SealRow(leaf.run_id, leaf.seq, leaf.to_bytes()) for leaf in leaves]
        return self.store.append_seals(self.tenant, rows)

    def _refuse_conflicts(self, leaves: Sequence[SealLeaf]) -> None:
        """A seal may not contradict one the log holds: another hash at a sealed seq, or any
        seal of a run after its final one. A second final seal of a rewritten run would be
        proven in the log as well as the first, and an evidence bundle shows one leaf only
        (the store's verification, which sees every seal of the run, fails it)."""
        held: dict[str, dict[int, SealLeaf]] = {}
        for leaf in leaves:
            seals = held.get(leaf.run_id)
            if seals is None:
                seals = {}
                for row in self.store.seals_for_run(self.tenant, leaf.run_id):
                    try:
                        seals[row.seq] = SealLeaf.from_bytes(row.leaf)
                    except SealingError:
                        continue  # the audit reports a bad leaf; it seals nothing here
                held[leaf.run_id] = seals
            same = seals.get(leaf.seq)
            if same is not None and same.hash != leaf.hash:
                raise SealingError(
                    f"run {leaf.run_id!r} seq {leaf.seq} is sealed already with another hash "
                    f"({same.hash}): refusing to seal {leaf.hash}",
                    what="leaf",
                )
            final = next((s for s in seals.values() if s.final), None)
            if final is not None and (leaf.seq != final.seq or not leaf.final):
                raise SealingError(
                    f"run {leaf.run_id!r} was sealed final at seq {final.seq}: refusing a seal "
                    f"at seq {leaf.seq} after it",
                    what="leaf",
                )
            seals[leaf.seq] = leaf

    def seal(self, leaves: Sequence[SealLeaf]) -> Note | None:
        """Append a batch of seals, then issue a checkpoint over them (when there is a key)."""
        if self.key is not None:
            frontier, _ = self._latest()
            held = self.store.seal_count(self.tenant)
            if held < frontier.size:
                raise SealingError(
                    f"the seal log holds fewer seals ({held}) than checkpoint {frontier.size} "
                    "covers: refusing to issue a checkpoint over an inconsistent tree",
                    what="consistency",
                )
        self.append(leaves)
        return self.issue() if self.key is not None else None

    def _latest(self) -> tuple[Frontier, Note | None]:
        return latest_frontier(
            self.store, self.tenant, origin=self.origin, key=self.key, trusted=self._issued
        )

    def issue(self) -> Note:
        """Issue (sign, keep, push) a checkpoint over every seal appended so far.

        When the latest checkpoint covers every seal already, none is signed
        (:attr:`issued_new` is false): that latest one is returned, and pushed to the
        witnesses all the same, since they may not hold it yet (it may have been issued by a
        recorder that had no witnesses).
        """
        if self.key is None:
            raise SealingError("issuing a checkpoint needs a signing key", what="key")
        issued = issue_checkpoint(
            self.store, self.tenant, self.key, origin=self.origin, trusted=self._issued
        )
        if issued is None:  # the latest checkpoint covers every seal already
            _, note = self._latest()
            assert note is not None
            self.issued_new = False
            if self.witnesses:
                self.push(note)
            return note
        self._issued = issued
        # signed and kept now, whatever it covers: a first checkpoint of an empty log too (a
        # size-0 checkpoint has no new leaf, and is new all the same)
        self.issued_new = True
        if self.witnesses:
            if issued.new_hashes:
                self._push(issued.note, issued.old, list(issued.new_hashes))
            else:  # a tree of size 0, or a larger checkpoint another process kept meanwhile
                self.push(issued.note)
        return issued.note

    def push(self, note: Note) -> Note:
        """Push ``note``, a checkpoint of this log, to every witness, whatever size each one
        holds (it answers a wrong guess with its size, tlog-witness 409, and the consistency
        proof from that size follows). Returns ``note`` with the cosignatures that came back
        (also :attr:`cosigned`); refusals and unreachable witnesses go to
        :attr:`witness_errors`."""
        self._push(note, Frontier(0), [])
        assert self.cosigned is not None
        return self.cosigned

    def _push(self, note: Note, frontier: Frontier, new_hashes: list[bytes]) -> None:
        from .witness import WitnessConflict

        cosigned = note
        size = Checkpoint.parse(note.text).size
        for witness in self.witnesses:
            old = frontier.size
            proof = consistency_from_frontier(frontier, new_hashes) if old else []
            try:
                try:
                    sigs = witness.add_checkpoint(old, proof, note)
                except WitnessConflict as conflict:
                    old = conflict.size
                    if old > size:
                        raise SealingError(
                            f"it holds checkpoint {old}, larger than this one ({size}): the "
                            "store's seal log was cut or rewritten after the witness saw it",
                            what="consistency",
                        ) from None
                    proof = self.consistency_proof(old, note) if old else []
                    sigs = witness.add_checkpoint(old, proof, note)
            except SealingError as exc:
                self.witness_errors.append(f"{witness}: {exc}")
                continue
            cosigned = cosigned.with_signatures(tuple(sigs))
        self.cosigned = cosigned

    def tree(self, size: int | None = None) -> Tree:
        """The whole tree, rebuilt from the stored leaves (O(n): for proofs and audits)."""
        rows = self.store.read_seals(self.tenant, 0, size)
        return Tree(leaf_hash(r.leaf) for r in rows)

    def consistency_proof(self, old: int, note: Note) -> list[bytes]:
        """A proof from the tree of ``old`` leaves to the checkpoint ``note``'s tree."""
        size = Checkpoint.parse(note.text).size
        if not 0 < old <= size:
            raise SealingError(f"no consistency proof from {old} to {size}", what="consistency")
        return self.tree(size).consistency_proof(old, size)


@dataclass(frozen=True, slots=True)
class TenantAudit:
    """What the store's seal log of one tenant proves, after a full recomputation."""

    tenant: str
    size: int | None
    """The size of the latest checkpoint that verified, or ``None``."""
    signer: str | None
    witnessed: tuple[tuple[str, int], ...] = ()
    """``(witness name, size)``: a witness cosigned the log at that size."""
    problem: str | None = None
    """Why the log cannot be trusted (a failure), or ``None``."""
    unsigned_reason: str | None = None
    """Why there is no trusted checkpoint (not a failure: the runs are unsealed)."""
    tree: Tree | None = field(default=None, compare=False, repr=False)
    checkpoint: Note | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "tenant": self.tenant,
            "checkpoint_size": self.size,
            "signed_by": self.signer,
            "witnessed_by": [{"witness": w, "size": n} for w, n in self.witnessed],
            "problem": self.problem,
            "unsigned_reason": self.unsigned_reason,
        }


def audit_tenant(
    store: Store,
    tenant: str,
    *,
    keys: Sequence[VerifierKey],
    witness_notes: Sequence[Note] = (),
    witness_keys: Sequence[VerifierKey] = (),
    log_name: str | None = None,
) -> TenantAudit:
    """Check ``tenant``'s latest checkpoint against trusted ``keys`` and the stored leaves,
    and against checkpoints held by witnesses (``witness_notes``).

    Whatever the checkpoints, every stored seal must be filed under the run and seq it names,
    and every run it names must still be in the store, or its deletion in the store audit
    (retention). A witness's checkpoint is held against the stored seals even when the store
    keeps no checkpoint or no log key is given, once a witness key (``witness_keys``)
    vouches for it: the store's owner cannot then drop the checkpoints to escape it.
    """
    rows = store.read_seals(tenant)
    problem = _filing_problem(store, tenant, rows)
    if problem is not None:
        return TenantAudit(tenant, None, None, problem=problem)
    origin = origin_for(tenant, log_name)
    row = store.latest_checkpoint(tenant)
    if row is None or not keys:
        # No checkpoint the store can be held to (none kept, or no log key to trust one by):
        # the witnesses' own checkpoints, those a witness key vouches for, still are. The
        # tree is built only for them: without, the unsigned verdict needs no root (most of
        # the audit's time when no key is configured). A kept checkpoint that does not even
        # read as one was changed behind the store's back, key or no key.
        if row is not None:
            try:
                Checkpoint.parse(Note.parse(row.note).text)
            except SealingError as exc:
                return TenantAudit(tenant, None, None, problem=f"latest checkpoint: {exc}")
        held = _held_by_witnesses(tenant, origin, witness_notes, keys, witness_keys)
        if isinstance(held, str):
            return TenantAudit(tenant, None, None, problem=held)
        stored_size = _stored_size(row)
        tree = Tree(leaf_hash(r.leaf) for r in rows) if held else None
        for wcp in held:
            assert tree is not None
            problem = _against_stored(tree, stored_size, wcp)
            if problem is not None:
                return TenantAudit(tenant, None, None, problem=problem)
        if row is None:
            reason = "no checkpoint was issued" + (
                f" ({len(rows)} seal(s) wait for one)" if rows else ""
            )
        else:
            reason = "no trusted verifier key was given (--key)"
        if witness_notes and not held:
            reason += (
                "; the witnesses' checkpoints were not checked: neither a log key (--key) nor "
                "a witness key (--witness-key) vouches for them"
            )
        elif held:
            sizes = ", ".join(str(w.size) for w in held)
            reason += f"; the stored seals match the witnessed checkpoint(s) of size {sizes}"
        return TenantAudit(tenant, None, None, unsigned_reason=reason, tree=tree)
    tree = Tree(leaf_hash(r.leaf) for r in rows)
    try:
        note = Note.parse(row.note)
        cp = Checkpoint.parse(note.text)
        signers = note.verified_by(list(keys))
    except SealingError as exc:
        return TenantAudit(tenant, None, None, problem=f"latest checkpoint: {exc}")
    if not signers:
        return TenantAudit(tenant, None, None, problem=_untrusted_signatures(cp, note, keys))
    if cp.origin != origin and not cp.origin.endswith(f"/tachograph/{tenant}"):
        return TenantAudit(
            tenant, None, None, problem=f"checkpoint origin {cp.origin!r} is not this tenant's"
        )
    if len(tree) < cp.size:
        return TenantAudit(
            tenant,
            None,
            signers[0].name,
            problem=f"checkpoint {cp.size} covers {cp.size} seals but the store holds {len(tree)}: "
            "seals were removed",
        )
    if tree.root(cp.size) != cp.root:
        return TenantAudit(
            tenant,
            None,
            signers[0].name,
            problem=f"the stored seals do not hash to the root of checkpoint {cp.size}: the seal "
            "log was changed after it was signed",
        )
    witnessed: list[tuple[str, int]] = []
    for wnote in witness_notes:
        against = _against_witness(tree, cp, note, wnote, keys, witness_keys)
        if isinstance(against, str):
            return TenantAudit(tenant, cp.size, signers[0].name, problem=against, tree=tree)
        witnessed.extend(against)
    return TenantAudit(
        tenant, cp.size, signers[0].name, tuple(witnessed), tree=tree, checkpoint=note
    )


def _untrusted_signatures(cp: Checkpoint, note: Note, keys: Sequence[VerifierKey]) -> str:
    """Why no signature line of the checkpoint ``note`` is a trusted key's. A line is matched
    to a key by its name and its key id together: a line that bears a trusted key's name with
    another key id is no signature by that key (and the name alone is anyone's to write)."""
    lines = []
    for sig in note.signatures:
        ids = [k.key_id.hex() for k in keys if k.name == sig.name]
        if sig.key_id.hex() in ids:  # a key given as trusted, but not a log key
            lines.append(
                f"the signature line of {sig.name} (key id {sig.key_id.hex()}) is by a key "
                "trusted as a witness (cosignature) key, not as a log key"
            )
        elif ids:
            lines.append(
                f"the signature line named {sig.name} carries key id {sig.key_id.hex()}, not "
                f"the id of the trusted key of that name ({', '.join(ids)}): it matches no "
                "trusted key"
            )
        else:
            lines.append(
                f"the signature line named {sig.name} (key id {sig.key_id.hex()}) matches no "
                "trusted key"
            )
    found = "; ".join(lines) if lines else "it carries no signature line"
    return f"checkpoint {cp.size} carries no signature by a trusted key: {found}"


def _tenant_of_origin(origin: str) -> str | None:
    """The tenant an origin ``<log name>/tachograph/<tenant>`` names (None: not of that form)."""
    _name, sep, tenant = origin.rpartition("/tachograph/")
    return tenant if sep else None


def _filing_problem(store: Store, tenant: str, rows: Sequence[SealRow]) -> str | None:
    """Whether a stored seal is filed under another run or seq than it names, or names a run
    the store no longer holds without a deletion of it in the store audit.

    A run's seals are found by the run and seq the store files them under (its index), not by
    parsing every leaf: a seal moved to another run would leave its own run unsealed, and a
    run deleted with its events would leave no run to hold against its seals.
    """
    sealed: dict[str, int] = {}
    for row in rows:
        try:
            leaf = SealLeaf.from_bytes(row.leaf)
        except SealingError as exc:
            return f"seal {row.index}: {exc}"
        if (leaf.tenant, leaf.run_id, leaf.seq) != (tenant, row.run_id, row.seq):
            return (
                f"seal {row.index} is filed under run {row.run_id!r} seq {row.seq} of tenant "
                f"{tenant!r}, but is for run {leaf.run_id!r} seq {leaf.seq} of tenant "
                f"{leaf.tenant!r}: a seal was moved"
            )
        sealed[leaf.run_id] = max(leaf.seq, sealed.get(leaf.run_id, -1))
    if not sealed:
        return None
    # The run summaries first (one row per run); only a sealed run without one (an orphan
    # whose events lost their summary, or a deleted run) needs the listing of every run that
    # has events, which reads the whole events index: not the price of every verdict.
    held = {info.run_id for info in store.runs(tenant=tenant)}
    missing = [run_id for run_id in sealed if run_id not in held]
    if missing:
        held = {run_id for t, run_id in store.run_keys() if t == tenant}
        missing = [run_id for run_id in sealed if run_id not in held]
    if not missing:
        return None
    deleted = _deleted_runs(store, tenant)
    for run_id in missing:
        if deleted is not None and run_id in deleted:
            continue
        audit = (
            "the store audit records no deletion of it"
            if deleted is not None
            else "the store audit, which would record its deletion, cannot be read"
        )
        return (
            f"run {run_id!r}, sealed up to seq {sealed[run_id]}, is not in the store and "
            f"{audit}: a sealed run was removed"
        )
    return None


def _deleted_runs(store: Store, tenant: str) -> set[str] | None:
    """The runs of ``tenant`` that retention deleted, from the store audit (None: unreadable)."""
    try:
        return {
            str(record.detail.get("run_id"))
            for record in store.audit_of("retention.delete", tenant=tenant)
        }
    except Exception:  # any engine's refusal: the caller says the audit was unreadable
        return None


def _stored_size(row: Any) -> int | None:
    """The size of the store's latest checkpoint, untrusted, or None (none, or unreadable)."""
    if row is None:
        return None
    try:
        return Checkpoint.parse(Note.parse(row.note).text).size
    except SealingError:
        return None


def _held_by_witnesses(
    tenant: str,
    origin: str,
    witness_notes: Sequence[Note],
    keys: Sequence[VerifierKey],
    witness_keys: Sequence[VerifierKey],
) -> str | list[Checkpoint]:
    """The witnesses' checkpoints of this log that a log key or a witness key vouches for,
    or a problem (a signature or cosignature that does not verify)."""
    held: list[Checkpoint] = []
    for wnote in witness_notes:
        try:
            wcp = Checkpoint.parse(wnote.text)
            if wcp.origin != origin and not wcp.origin.endswith(f"/tachograph/{tenant}"):
                continue
            vouched = bool(keys and wnote.verified_by(list(keys))) or any(
                verify_cosignature(wnote, k) is not None for k in witness_keys
            )
        except SealingError as exc:
            return f"the witness's checkpoint: {exc}"
        if vouched and wcp.size > 0:
            held.append(wcp)
    return held


def _against_stored(tree: Tree, stored_size: int | None, wcp: Checkpoint) -> str | None:
    """A witnessed checkpoint held against the stored seals, when the store's own checkpoint
    cannot be trusted or is missing."""
    if stored_size is None or stored_size < wcp.size:
        latest = "none" if stored_size is None else str(stored_size)
        return (
            f"a witness holds checkpoint {wcp.size}, larger than the store's latest ({latest}): "
            "the store's seal log was cut or rewritten"
        )
    if len(tree) < wcp.size:
        return (
            f"a witness holds checkpoint {wcp.size}, but the store holds only {len(tree)} "
            "seal(s): seals were removed"
        )
    if tree.root(wcp.size) != wcp.root:
        return (
            f"the stored seals do not hash to the root of checkpoint {wcp.size} that a witness "
            "holds: the store's seal log was rewritten after the witness saw it"
        )
    return None


def _against_witness(
    tree: Tree,
    cp: Checkpoint,
    note: Note,
    wnote: Note,
    keys: Sequence[VerifierKey],
    witness_keys: Sequence[VerifierKey],
) -> str | list[tuple[str, int]]:
    """A problem, or ``(witness, size)`` for the cosignatures on the witness's checkpoint."""
    try:
        wcp = Checkpoint.parse(wnote.text)
        if not wnote.verified_by(list(keys)):
            return "the witness's checkpoint is not signed by a trusted log key"
        cosigners = [k.name for k in witness_keys if verify_cosignature(wnote, k) is not None]
    except SealingError as exc:
        return f"the witness's checkpoint: {exc}"
    if _tenant_of_origin(wcp.origin) != _tenant_of_origin(cp.origin):
        return []  # another tenant's log
    # The same tenant's log under another origin is held to the same tree: a log re-signed
    # under a new name from size 0 (every seal rewritten) must not make the witness's copy of
    # the old one count for nothing.
    if wcp.size == cp.size and wcp.root != cp.root:
        return (
            f"equivocation: two checkpoints of size {cp.size} signed by the log have different "
            "roots (the store's and the witness's)"
        )
    if wcp.size > cp.size:
        return (
            f"a witness holds checkpoint {wcp.size}, larger than the store's latest ({cp.size}): "
            "the store's seal log was cut or rewritten"
        )
    try:
        proof = tree.consistency_proof(wcp.size, cp.size)
        verify_consistency(wcp.size, cp.size, proof, wcp.root, cp.root)
    except (ProofError, ValueError):
        return (
            f"the store's log is not consistent with checkpoint {wcp.size} that a witness holds: "
            "the store was rewritten after the witness saw it"
        )
    return [(name, wcp.size) for name in cosigners]
