"""The corpus on disk: saved runs (JSONL) with their verdict sidecars.

A *corpus* is a folder of runs kept as fixtures: each run is one JSONL file (SPEC section 4,
``NAME.jsonl``) with a sidecar beside it (``NAME.tacho.json``) that says whether the run was
**good** or **bad**, why, and for a bad run the ``seq`` of the step that was wrong. Replaying
a corpus is :mod:`tachograph.regression`.
"""

from __future__ import annotations

import enum
import os
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..errors import CorpusError, FormatError, VerificationFailed
from ..record.canonical import loads_untrusted
from ..record.event import Event, now_ts
from ..record.files import write_whole
from ..record.jsonl import write_events
from ..record.seal import Processor, Sealer
from ..store import Store, open_store, verify_stored

__all__ = [
    "FIXTURE_VERSION",
    "SIDECAR_SUFFIX",
    "CorpusError",
    "CorpusRun",
    "Outcome",
    "Verdict",
    "load_corpus",
    "read_sidecar",
    "save_run",
    "write_json",
]

FIXTURE_VERSION = 1
"""Version of the sidecar format; a newer sidecar is reported, never guessed at."""

SIDECAR_SUFFIX = ".tacho.json"
"""The sidecar of ``NAME.jsonl`` is ``NAME.tacho.json``."""


class Verdict(str, enum.Enum):
    """What a person decided about a saved run."""

    GOOD = "good"
    BAD = "bad"

    @classmethod
    def parse(cls, value: str | Verdict) -> Verdict:
        """The verdict named by ``value``, or fail listing the valid ones."""
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(repr(v.value) for v in cls)
            raise CorpusError(f"unknown verdict {value!r}; expected one of {valid}") from None


class Outcome(str, enum.Enum):
    """How a saved run fared against the agent under test."""

    REPRODUCED = "reproduced"
    CHANGED = "changed"
    FIXED = "fixed"
    STILL_WRONG = "still_wrong"
    RAISED = "raised"
    UNREPLAYABLE = "unreplayable"

    @property
    def passed(self) -> bool:
        """True for the outcomes that let a build pass."""
        return self in (Outcome.REPRODUCED, Outcome.FIXED)

    @property
    def label(self) -> str:
        """The outcome as a person reads it (``still wrong``)."""
        return self.value.replace("_", " ")

    def __str__(self) -> str:
        return self.value


# -- the corpus on disk -----------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusRun:
    """One saved run: its fixture file, its sidecar, and what the sidecar says.

    ``problem`` is set when the entry cannot be used as it is (a broken sidecar, a sidecar
    with no run file); such an entry is reported as ``unreplayable`` with that reason, and
    its ``verdict`` is ``None`` when the sidecar cannot say it.
    """

    name: str
    path: Path
    sidecar: Path
    run_id: str | None
    verdict: Verdict | None
    wrong_at: int | None = None
    note: str | None = None
    accepted: tuple[Mapping[str, Any], ...] = ()
    problem: str | None = None


def _file_stem(run_id: str) -> str:
    # ':' is legal in a run id but not in a file name everywhere.
    return run_id.replace(":", "_")


NAME_BYTES = 255 - len(f".{SIDECAR_SUFFIX}.{'0' * 16}.partial")
"""The most bytes (UTF-8) of a saved run's name: every file a save writes must have a name
of at most 255 bytes, the sidecar's temporary one (``.NAME.tacho.json.<16 hex>.partial``)
the longest."""


def _name_fits(stem: str) -> bool:
    return len(stem.encode("utf-8", "surrogateescape")) <= NAME_BYTES


def _plain_name(name: str) -> bool:
    """A saved run's file name that stays in its folder and prints as itself."""
    return (
        bool(name)
        and name not in (".", "..")
        and "/" not in name
        and "\\" not in name
        and name.isprintable()
        and name == name.strip()
    )


_UNPORTABLE_CHARS = frozenset('<>:"|?*')
_DEVICE_NAMES = frozenset(
    {"con", "prn", "aux", "nul"}
    | {f"com{i}" for i in "123456789¹²³"}
    | {f"lpt{i}" for i in "123456789¹²³"}
)


def _unportable(stem: str) -> str | None:
    """Why ``stem`` (of ``STEM.jsonl`` and ``STEM.tacho.json``) cannot be checked out on
    every system a corpus is committed for (Windows refuses these names; macOS and Windows
    fold case), or ``None``."""
    bad = sorted({c for c in stem if c in _UNPORTABLE_CHARS})
    if bad:
        return f"it holds {' '.join(bad)}, which Windows does not allow in a file name"
    if stem.split(".")[0].rstrip(" ").lower() in _DEVICE_NAMES:
        return f"{stem.split('.')[0]!r} is a device name on Windows (CON, PRN, AUX, NUL, COM1...)"
    if stem.endswith((".", " ")):
        return "Windows drops a trailing dot or space from a file name"
    return None


def _fold(name: str) -> str:
    """A file name as case-insensitive file systems compare it (macOS also normalizes)."""
    return unicodedata.normalize("NFC", name).casefold()


def _same_name_elsewhere(folder: Path, stem: str) -> Path | None:
    """A run of ``folder`` whose name differs from ``stem`` only in case: one file on a
    case-insensitive file system."""
    if not folder.is_dir():
        return None
    wanted = _fold(stem)
    for existing in folder.glob("*.jsonl"):
        other = existing.name[: -len(".jsonl")]
        if other != stem and _fold(other) == wanted:
            return existing
    for existing in folder.glob("*" + SIDECAR_SUFFIX):
        other = existing.name[: -len(SIDECAR_SUFFIX)]
        if other != stem and _fold(other) == wanted:
            return existing
    return None


def _saved_run_id(sidecar: Path) -> str | None:
    try:
        run_id = read_sidecar(sidecar).get("run_id")
    except CorpusError:
        return None
    return run_id if isinstance(run_id, str) else None


def _sidecar_of(path: Path) -> Path:
    return path.with_name(path.name[: -len(".jsonl")] + SIDECAR_SUFFIX)


def read_sidecar(path: Path) -> dict[str, Any]:
    try:
        data = loads_untrusted(path.read_bytes(), location=f"sidecar {path.name}")
    except OSError as exc:
        raise CorpusError(f"sidecar {path.name} cannot be read: {exc}", path=str(path)) from None
    except FormatError as exc:
        raise CorpusError(f"sidecar {path.name} cannot be read: {exc}", path=str(path)) from None
    if not isinstance(data, dict):
        raise CorpusError(f"sidecar {path.name} is not a JSON object", path=str(path))
    version = data.get("tachograph_fixture")
    if not isinstance(version, int) or isinstance(version, bool):
        raise CorpusError(f"sidecar {path.name} has no tachograph_fixture version", path=str(path))
    if version > FIXTURE_VERSION:
        raise CorpusError(
            f"sidecar {path.name} has format version {version}; this tachograph reads up to "
            f"{FIXTURE_VERSION}: upgrade tachograph",
            path=str(path),
        )
    return data


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    with write_whole(path) as out:
        out.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")


def _entry(root: Path, path: Path) -> CorpusRun:
    name = path.relative_to(root).as_posix()[: -len(".jsonl")]
    sidecar = _sidecar_of(path)
    if not sidecar.exists():
        # A plain export dropped into the corpus is taken as a good run.
        return CorpusRun(name, path, sidecar, None, Verdict.GOOD, note=None)
    try:
        data = read_sidecar(sidecar)
        verdict = Verdict.parse(str(data.get("verdict")))
        wrong_at = data.get("wrong_at")
        if verdict is Verdict.BAD and (
            not isinstance(wrong_at, int) or isinstance(wrong_at, bool) or wrong_at < 0
        ):
            raise CorpusError(f"sidecar {sidecar.name}: a bad run needs wrong_at (a seq)")
        if verdict is Verdict.GOOD and wrong_at is not None:
            raise CorpusError(f"sidecar {sidecar.name}: a good run has no wrong_at")
        accepted = data.get("accepted") or []
        if not isinstance(accepted, list) or not all(isinstance(a, dict) for a in accepted):
            raise CorpusError(f"sidecar {sidecar.name}: 'accepted' must be a list of objects")
        run_id = data.get("run_id")
        note = data.get("note")
        return CorpusRun(
            name,
            path,
            sidecar,
            run_id if isinstance(run_id, str) else None,
            verdict,
            wrong_at,
            note if isinstance(note, str) else None,
            tuple(accepted),
        )
    except CorpusError as exc:
        # whatever the sidecar meant is unknown: never shown as a good run
        return CorpusRun(name, path, sidecar, None, None, problem=str(exc))


def _orphan(name: str, run_file: Path, sidecar: Path, problem: str) -> CorpusRun:
    """A sidecar without its run: its verdict and note as it says them, if it can be read."""
    try:
        data = read_sidecar(sidecar)
        verdict: Verdict | None = Verdict.parse(str(data.get("verdict")))
    except CorpusError:
        data, verdict = {}, None
    note = data.get("note")
    return CorpusRun(
        name,
        run_file,
        sidecar,
        None,
        verdict,
        note=note if isinstance(note, str) else None,
        problem=problem,
    )


def load_corpus(directory: str | os.PathLike[str]) -> tuple[CorpusRun, ...]:
    """Every saved run under ``directory`` (recursively), sorted by name.

    A ``.jsonl`` file without a sidecar is a good run. A sidecar without its run file, or one
    that cannot be read, becomes an entry with a ``problem``; nothing here raises for a single
    bad entry, so that one broken fixture does not hide the others.
    """
    root = Path(directory)
    if not root.is_dir():
        raise CorpusError(f"no corpus directory at {root}", path=str(root))
    entries = [_entry(root, p) for p in root.rglob("*.jsonl") if p.is_file()]
    for sidecar in root.rglob("*" + SIDECAR_SUFFIX):
        run_file = sidecar.with_name(sidecar.name[: -len(SIDECAR_SUFFIX)] + ".jsonl")
        if not run_file.exists():
            name = run_file.relative_to(root).as_posix()[: -len(".jsonl")]
            problem = f"sidecar {sidecar.name} has no run file {run_file.name}"
            entries.append(_orphan(name, run_file, sidecar, problem))
    return tuple(sorted(entries, key=lambda e: e.name))


# -- saving -----------------------------------------------------------------------------------


def _rechain(events: Iterable[Event], processors: Sequence[Processor]) -> list[Event]:
    """Apply processors to every payload and rebuild the chain over the new digests, through
    the one write pipeline (:class:`~tachograph.record.seal.Sealer`).

    Default idempotency keys and prompt hashes are derived again from the processed data, as
    a recording through the processors would have derived them; other envelope fields and
    the salts keep their recorded values, so the fixture still reads as the same run.
    """
    out: list[Event] = []
    sealer: Sealer | None = None
    for event in events:
        if sealer is None:
            sealer = Sealer(
                run_id=event.run_id,
                actor=event.actor,
                tenant=event.tenant,
                processors=processors,
            )
        try:
            resealed = sealer.reseal(event)
        except Exception as exc:
            raise _processing_failed(processors, event, exc) from None
        if not event.erased and not isinstance(resealed.payload, dict):
            raise _processing_failed(processors, event, None)
        out.append(resealed)
    return out


def _processing_failed(
    processors: Sequence[Processor], event: Event, exc: Exception | None
) -> CorpusError:
    """Which processor failed on ``event``, and how: it raised, or returned no payload
    (a processor must be deterministic, so asking each again, in order, finds it)."""
    payload: Any = dict(event.payload or {})
    culprit, how = None, None
    for processor in processors:
        try:
            payload = processor(event.type, payload)
        except Exception as again:
            culprit, how = processor, f"raised {type(again).__name__}: {again}"
            break
        if not isinstance(payload, dict):
            culprit = processor
            how = f"returned {type(payload).__name__}, not a payload (a dict)"
            break
    if culprit is None:
        names = ", ".join(_processor_name(p) for p in processors)
        how = f"{type(exc).__name__}: {exc}" if exc is not None else "no payload came back"
        return CorpusError(
            f"processing seq {event.seq} ({event.type}) with {names} failed: {how}",
            run_id=event.run_id,
            seq=event.seq,
        )
    return CorpusError(
        f"processor {_processor_name(culprit)} failed on seq {event.seq} ({event.type}): {how}",
        run_id=event.run_id,
        seq=event.seq,
    )


def _processor_name(processor: Processor) -> str:
    module = getattr(processor, "__module__", None) or "?"
    qual = getattr(processor, "__qualname__", None) or type(processor).__qualname__
    return f"{module}:{qual}"


def save_run(
    store: Store | str | os.PathLike[str] | None,
    run_id: str,
    *,
    to: str | os.PathLike[str],
    verdict: Verdict | str,
    note: str | None = None,
    wrong_at: int | None = None,
    processors: Sequence[Processor] = (),
    name: str | None = None,
    tenant: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Save one stored run into the corpus folder ``to``; returns the path of its JSONL file.

    Without ``processors`` the run is exported byte for byte (its original chain). With
    them, every payload passes through the processors (the recorder's hook: redaction,
    trimming) and the chain is rebuilt over the new digests; the sidecar then names the
    processors and the original head hash. A ``bad`` run needs ``wrong_at``, the seq of the
    step that was wrong. The sidecar ``NAME.tacho.json`` holds verdict, note and provenance.
    """
    kind = Verdict.parse(verdict)
    if kind is Verdict.BAD and wrong_at is None:
        raise CorpusError("a bad run needs wrong_at: the seq of the step that was wrong")
    if kind is Verdict.GOOD and wrong_at is not None:
        raise CorpusError("wrong_at is only for bad runs")
    st = open_store(store, create=False) if not isinstance(store, Store) else store
    try:
        info = st.run_info(run_id, tenant=tenant)
        events = list(st.read(run_id, tenant=info.tenant, decode=bool(processors)))
        report = verify_stored(st, run_id, tenant=info.tenant)
    finally:
        if st is not store:
            st.close()
    if not report.ok:
        raise VerificationFailed(
            f"refusing to save a run that does not verify: {report.render()}",
            report=report,
            run_id=run_id,
        )
    if wrong_at is not None and not 0 <= wrong_at < len(events):
        raise CorpusError(
            f"wrong_at {wrong_at} is outside run {run_id!r} (seq 0..{len(events) - 1})",
            run_id=run_id,
            seq=wrong_at,
        )
    # processed before anything is made on disk: a processor that fails leaves nothing behind
    written = _rechain(events, processors) if processors else events
    folder = Path(to)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CorpusError(
            f"cannot make the corpus folder {folder}: {exc.strerror or exc}", path=str(folder)
        ) from None
    if not folder.is_dir():
        raise CorpusError(f"{folder} is not a folder", path=str(folder))
    if name is not None and not _plain_name(name):
        raise CorpusError(
            f"name {name!r} is not a plain file name: it must be printable text with no "
            "folder separator, not '.' or '..', and name a file inside the corpus folder",
            path=str(folder),
        )
    stem = name or _file_stem(run_id)
    unportable = _unportable(stem)
    if unportable is not None:
        raise CorpusError(
            f"name {stem!r} cannot be checked out everywhere: {unportable}; "
            + ("choose another name" if name else "give one with name= (tacho save --name)"),
            path=str(folder),
            run_id=run_id,
        )
    if not _name_fits(stem):
        raise CorpusError(
            f"name {stem[:40]!r}... is too long: {len(stem.encode('utf-8', 'surrogateescape'))} "
            f"bytes in UTF-8, at most {NAME_BYTES} fit a file name with the suffixes a save "
            "adds" + ("" if name else " (give a shorter one with name=, tacho save --name)"),
            path=str(folder),
        )
    path = folder / f"{stem}.jsonl"
    sidecar = _sidecar_of(path)
    twin = _same_name_elsewhere(folder, stem)
    if twin is not None:
        held = _saved_run_id(_sidecar_of(twin) if twin.suffix == ".jsonl" else twin)
        raise CorpusError(
            f"name {stem!r} differs only in case from {twin.name}"
            + (f" (run {held!r})" if held else "")
            + ": on a case-insensitive file system (Windows, macOS) they are one file; "
            "choose another name, or use that one",
            path=str(twin),
            run_id=run_id,
        )
    held = _saved_run_id(sidecar) if sidecar.exists() else None
    other = held is not None and held != run_id
    if other and name is None:
        # the name came from the run id (':' written '_'): never replace another run with it
        raise CorpusError(
            f"{path} holds another run, {held!r}, whose id gives the same file name as "
            f"{run_id!r}; give this run its own name with name= (tacho save --name)",
            path=str(path),
            run_id=run_id,
        )
    if not overwrite and (path.exists() or sidecar.exists()):
        holds = f" and holds another run, {held!r}" if other else ""
        raise CorpusError(
            f"{path} already exists{holds}; pass overwrite=True (tacho save --force) to replace it",
            path=str(path),
            run_id=run_id,
        )
    meta: dict[str, Any] = {
        "tachograph_fixture": FIXTURE_VERSION,
        "run_id": run_id,
        "verdict": kind.value,
        "note": note,
        "wrong_at": wrong_at,
        "saved_at": now_ts(),
        "events": len(events),
        "source_head": info.head_hash,
        "processors": [_processor_name(p) for p in processors],
        "accepted": [],
    }
    if wrong_at is not None:
        meta["wrong_type"] = events[wrong_at].type
    # The run's file takes its name last, after its sidecar: a stop in between (Ctrl-C,
    # SIGTERM, a full disk) must never leave a run without its verdict, which the corpus
    # would take for a good run. A sidecar this call made is taken back if the run's file
    # did not take its name.
    had_sidecar = sidecar.exists()
    try:
        with write_whole(path) as out:  # payloads: the owner's only, as in the store
            write_events(written, out)
            write_json(sidecar, meta)
    except BaseException as exc:
        if not had_sidecar and not path.exists():
            sidecar.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise CorpusError(
                f"cannot write {path}: {exc.strerror or exc}", path=str(path), run_id=run_id
            ) from None
        raise
    return path
