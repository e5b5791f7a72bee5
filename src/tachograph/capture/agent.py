"""Recording a run: the agent spec, the environment fingerprint, and ``record``.

Two styles, one engine:

* **decorator style**: the agent calls ``@tool`` and ``@model`` functions; wrap the run in
  ``with tachograph.record(store, actor=..., input=...) as run`` or call
  :func:`record_run` with the agent function.
* **edge style**: the agent receives its edges as arguments, ``agent(input, model, tool)``;
  declare them with :class:`Agent` (``model=``, ``tools=``, ``edges=True``).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, overload

from .._version import __version__
from ..errors import ProfileError, RecordingError, WriteFailed
from ..privacy.redactor import default_processors, redact_secrets
from ..record.event import EventType, new_ulid
from ..record.seal import KEY_SECRET_FIELD, new_key_secret, sha256_text
from ..store import Store, open_store
from .boundary import cancelled, error_info
from .foreign import FrameworkTool, framework_tool
from .recorder import (
    Durability,
    Listener,
    Observer,
    Processor,
    Recorder,
    close_writer,
    store_gone,
)
from .runtime import ToolSpec
from .seals import SealPolicy
from .session import Session

__all__ = [
    "Agent",
    "Run",
    "RunResult",
    "agent",
    "as_agent",
    "dry_run_default",
    "fingerprint",
    "output_outside_profile",
    "record",
    "record_run",
    "release_store",
]

RECORDER = f"tachograph-{__version__}"


def output_outside_profile(run_id: str, bad: ProfileError) -> ProfileError:
    """The error a run ends with when its agent returned ``bad``'s value (outside the JSON
    profile): one wording for recording and replay, which compares the two."""
    path = str(bad.fields.get("path") or "").replace("payload.output", "output", 1)
    return ProfileError(
        f"the output of run {run_id!r} is outside the JSON profile: "
        f"{str(bad).replace('payload.output', 'output')}",
        path=path,
        run_id=run_id,
    )


def _runtime() -> str:
    return f"{sys.implementation.name}-{platform.python_version()}"


@functools.lru_cache(maxsize=64)
def _git_version(directory: str) -> str | None:
    try:
        head = subprocess.run(
            ["git", "-C", directory, "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", directory, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"git:{head}" + ("-dirty" if dirty else "") if head else None


@functools.lru_cache(maxsize=1)
def _packages_distributions() -> Mapping[str, list[str]]:
    # Scanning every installed distribution takes up to a second: once per process. Imported
    # here: importlib.metadata alone is a tenth of the time ``import tachograph`` takes.
    import importlib.metadata

    return importlib.metadata.packages_distributions()


@functools.lru_cache(maxsize=256)
def _installed_version(top: str, path: str | None) -> str | None:
    """``<distribution>-<version>`` of the distribution that installed the file ``path``, a
    module of the top-level package ``top``; None when none did. The name alone is not
    enough: a local ``agents.py`` beside an installed ``openai-agents`` (which provides a
    package ``agents``) was recorded as that distribution's version, and its edits never
    showed as drift. An editable install lists its finder, not the module: its code changes
    without a new version, so it is versioned as code outside a distribution is."""
    dists = _packages_distributions().get(top)
    if not dists or not path:
        return None
    import importlib.metadata

    real = os.path.realpath(path)
    base = os.path.basename(real)
    for name in dists:
        dist = importlib.metadata.distribution(name)
        for file in dist.files or ():
            if file.name == base and os.path.realpath(str(dist.locate_file(file))) == real:
                return f"{name}-{dist.version}"
    return None


_MAX_SOURCE_FILES = 2000
"""A digest of more files than this would cost more than it says: the digest stops there."""


def _source_files(module: Any) -> list[Path]:
    """The agent's own source files: its top-level package's ``.py`` files, or its module."""
    path = getattr(module, "__file__", None)
    if not path:
        return []
    top = sys.modules.get(str(module.__name__).split(".")[0])
    top_file = getattr(top, "__file__", None) if top is not None else None
    if top is not module and top_file and Path(top_file).name == "__init__.py":
        root = Path(top_file).resolve().parent
        files = sorted(
            p for p in root.rglob("*.py") if "__pycache__" not in p.parts and p.is_file()
        )
        return files[:_MAX_SOURCE_FILES]
    return [Path(path).resolve()]


def source_digest(fn: Callable[..., Any]) -> str | None:
    """``src:`` and the first 16 hex chars of the SHA-256 over the agent's own source files
    (relative path and bytes of each), or None when it has none (a REPL, a notebook cell)."""
    module = inspect.getmodule(fn)
    files = _source_files(module) if module is not None else []
    if not files:
        return None
    root = files[0].parent if len(files) == 1 else Path(os.path.commonpath(files))
    digest = hashlib.sha256()
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        name = path.relative_to(root).as_posix().encode()
        digest.update(len(name).to_bytes(4, "big") + name)
        digest.update(len(data).to_bytes(8, "big") + data)
    return "src:" + digest.hexdigest()[:16]


def code_version_of(fn: Callable[..., Any]) -> str | None:
    """The agent's own version: its distribution's version, else its git commit, else a
    digest of its own source files (:func:`source_digest`), so that changed code outside git
    is never taken for the recorded code."""
    module = inspect.getmodule(fn)
    if module is None:
        return None
    path = getattr(module, "__file__", None)
    try:
        installed = _installed_version(module.__name__.split(".")[0], path)
        if installed is not None:
            return installed
    except Exception:
        pass
    if path:
        version = _git_version(str(Path(path).resolve().parent))
        if version is not None:
            return version
    return source_digest(fn)


def _tool_spec(item: Any) -> ToolSpec | FrameworkTool:
    spec = getattr(item, "__tachograph_tool__", None)
    if isinstance(spec, ToolSpec):
        return spec
    if isinstance(item, (ToolSpec, FrameworkTool)):
        return item
    foreign = framework_tool(item)  # an Agents SDK FunctionTool, a LangChain BaseTool, ...
    if foreign is not None:
        return foreign
    raise RecordingError(
        f"{item!r} is not a tachograph tool (decorate it with @tachograph.tool) nor a "
        "framework tool with a name and a JSON schema"
    )


def _model_id(item: Any) -> str:
    spec = getattr(item, "__tachograph_model__", None)
    if spec is not None:
        return str(spec.model)
    if isinstance(item, str):
        return item
    raise RecordingError(f"{item!r} is not a model id or a @tachograph.model function")


@dataclass(frozen=True)
class Agent:
    """An agent with what it declares: models, prompts, tools, version.

    Calling it calls the agent. With ``edges=True`` the function is called as
    ``fn(input, model, tool)`` where ``model`` is the declared model function and ``tool`` is
    ``tool(name, **args)`` dispatching to the declared tools.
    """

    fn: Callable[..., Any]
    name: str
    models: tuple[Any, ...] = ()
    prompts: Mapping[str, str] = field(default_factory=dict)
    tools: tuple[Any, ...] = ()
    code_version: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    edges: bool = False

    def __call__(self, input: Any) -> Any:
        if not self.edges:
            return self.fn(input)
        by_name = {_tool_spec(t).name: t for t in self.tools}
        model_fns = [m for m in self.models if not isinstance(m, str)]
        model_fn = model_fns[0] if model_fns else None

        def tool(name: str, /, **args: Any) -> Any:
            try:
                target = by_name[name]
            except KeyError:
                known = ", ".join(sorted(by_name)) or "none"
                raise RecordingError(f"unknown tool {name!r}; declared tools: {known}") from None
            return target(**args)

        return self.fn(input, model_fn, tool)

    @property
    def is_async(self) -> bool:
        """True when the agent function is a coroutine function."""
        return inspect.iscoroutinefunction(self.fn)

    def fingerprint(self) -> dict[str, Any]:
        """The environment fingerprint of SPEC section 7 for this agent, now."""
        return fingerprint(
            code_version=self.code_version
            if self.code_version is not None
            else code_version_of(self.fn),
            models=[_model_id(m) for m in self.models] if self.models else None,
            prompts=self.prompts,
            tools=self.tools if self.tools else None,
        )


@overload
def agent(fn: Callable[..., Any]) -> Agent: ...


@overload
def agent(
    fn: None = None,
    *,
    name: str | None = None,
    models: Sequence[Any] = (),
    prompts: Mapping[str, str] | None = None,
    tools: Sequence[Any] = (),
    code_version: str | None = None,
    labels: Mapping[str, str] | None = None,
    edges: bool = False,
) -> Callable[[Callable[..., Any]], Agent]: ...


def agent(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    models: Sequence[Any] = (),
    prompts: Mapping[str, str] | None = None,
    tools: Sequence[Any] = (),
    code_version: str | None = None,
    labels: Mapping[str, str] | None = None,
    edges: bool = False,
) -> Agent | Callable[[Callable[..., Any]], Agent]:
    """Declare an agent (decorator or call); see :class:`Agent`."""

    def build(func: Callable[..., Any]) -> Agent:
        return Agent(
            fn=func,
            name=name or func.__name__,
            models=tuple(models),
            prompts=dict(prompts or {}),
            tools=tuple(tools),
            code_version=code_version,
            labels=dict(labels or {}),
            edges=edges,
        )

    return build(fn) if fn is not None else build


def fingerprint(
    *,
    code_version: str | None = None,
    models: Iterable[str] | None = None,
    prompts: Mapping[str, str] | None = None,
    tools: Iterable[Any] | None = None,
) -> dict[str, Any]:
    """Build the ``env`` of ``run.started``: what the agent declared. Undeclared models and
    tools are listed as none (never every ``@model`` and ``@tool`` this process happens to
    have imported); what a run used is in its events (each model call names its exact model
    id, each tool call its tool), and replay compares those. A prompt is hashed with its
    secrets redacted (an API key pasted into a template): its hash, unsalted, would let
    anyone who guesses the key confirm it, as a redacted payload must not (SPEC section 5)."""
    model_ids = sorted(set(models)) if models is not None else []
    specs = [_tool_spec(t) for t in tools] if tools is not None else []
    return {
        "code_version": code_version,
        "runtime": _runtime(),
        "recorder": RECORDER,
        "models": model_ids,
        "prompts": {
            name: sha256_text(redact_secrets.redact_text(text))
            for name, text in sorted((prompts or {}).items())
        },
        "tools": {spec.name: spec.fingerprint() for spec in sorted(specs, key=lambda s: s.name)},
    }


class Run:
    """The handle of a run being recorded. Set :attr:`output` before the block ends."""

    def __init__(self, session: Session, recorder: Recorder, store: Store) -> None:
        self.session = session
        self.recorder = recorder
        self.store = store
        self.output: Any = None
        self.status: str | None = None
        self.error: dict[str, Any] | None = None

    @property
    def run_id(self) -> str:
        """The id of the run."""
        return self.recorder.run_id

    def flush(self) -> None:
        """Wait until everything recorded so far is durable."""
        self.recorder.flush()


def dry_run_default(dry_run: bool | None) -> bool:
    # TACHOGRAPH_DRY_RUN is a process-wide safety switch: when it is on, no argument can
    # turn dry run off.
    if os.environ.get("TACHOGRAPH_DRY_RUN", "").lower() in ("1", "true", "yes", "on"):
        return True
    return bool(dry_run)


class record:
    """Record one run around any agent code (``with`` or ``async with``).

    On a normal exit the run finishes ``ok`` with ``run.output``; an exception finishes it as
    ``error`` (and propagates); ``KeyboardInterrupt`` and cancellation finish it ``aborted``.

    ``dry_run=True``, or ``TACHOGRAPH_DRY_RUN=1`` in the environment (which no argument
    overrides), runs ``write`` and ``irreversible`` tools through their own ``dry_run``
    function or a synthesized result instead of their body; each such ``tool.completed`` is
    marked ``"dry_run": true`` and ``run.started`` is labelled ``tachograph.dry_run``.

    The run is sealed (SPEC section 9) as it is recorded, in its store's seal log: at its end,
    and every 1000 events or 10 seconds while it runs (``seal``: a
    :class:`~tachograph.capture.seals.SealPolicy`, or ``False`` to opt out; default on unless
    ``TACHOGRAPH_SEAL=off``).

    ``tenant`` is the run's tenant: by default the store's (a store opened with
    ``?tenant=T``), else ``"default"``; a tenant other than the store's raises
    :class:`~tachograph.errors.StoreError` before anything is written.

    ``processors`` run on every payload before it is hashed; they are preceded by
    :data:`tachograph.privacy.redact_secrets` (API keys, tokens, passwords become markers)
    unless ``redact_secrets=False``, or by the PII policy when ``TACHOGRAPH_PII=on``.

    The run is bound to the current context (a context variable): asyncio tasks created inside
    it take part, a plain ``threading.Thread`` does not (hand work over with
    ``asyncio.to_thread`` or ``contextvars.copy_context().run``).
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | None = None,
        *,
        actor: str,
        input: Any = None,
        run_id: str | None = None,
        tenant: str | None = None,
        agent: Agent | None = None,
        labels: Mapping[str, str] | None = None,
        models: Iterable[str] | None = None,
        prompts: Mapping[str, str] | None = None,
        tools: Iterable[Any] | None = None,
        code_version: str | None = None,
        durability: Durability | str = Durability.EFFECTS,
        processors: Sequence[Processor] = (),
        listeners: Sequence[Listener] = (),
        observers: Sequence[Observer] | None = None,
        dry_run: bool | None = None,
        seed: int | None = None,
        parent: Mapping[str, Any] | None = None,
        key_secret: str | None = None,
        redact_secrets: bool = True,
        seal: SealPolicy | bool | None = None,
    ) -> None:
        self._store = store if isinstance(store, Store) else open_store(store)
        self._owns_store = not isinstance(store, Store)
        self._pid = os.getpid()  # the process that opened the store, if this recording did
        self.actor = actor
        self.input = input
        self.run_id = run_id or f"run_{new_ulid()}"
        self.tenant = tenant
        self.labels = dict(agent.labels if agent else {})
        self.labels.update(labels or {})
        if agent is not None:
            self.env = agent.fingerprint()
        else:
            self.env = fingerprint(
                code_version=code_version, models=models, prompts=prompts, tools=tools
            )
        if agent is not None and code_version is not None:
            self.env["code_version"] = code_version
        self.durability = Durability.parse(durability)
        # Secrets are redacted in every recording unless the caller opts out (docs/privacy.md).
        self.processors = default_processors(processors, redact_secrets=redact_secrets)
        self.listeners = listeners
        self.observers = observers
        self.dry_run = dry_run_default(dry_run)
        self.seed = seed
        self.parent = dict(parent) if parent else None
        # SPEC section 5: keys are keyed hashes under a per-run secret kept in run.started.
        # A fork reuses its parent's, so that the keys it re-bases stay the keys it would derive.
        self.key_secret = key_secret or new_key_secret()
        self.seal = seal
        self.run: Run | None = None

    def start(self) -> Run:
        """Begin the run (what ``with`` does): write ``run.started`` and bind the session."""
        try:
            recorder = Recorder(
                self._store,
                run_id=self.run_id,
                actor=self.actor,
                tenant=self.tenant,
                durability=self.durability,
                processors=self.processors,
                listeners=self.listeners,
                observers=self.observers,
                seal=self.seal,
            )
            self.tenant = recorder.tenant  # the store's tenant when none was named
            if self._store.head(self.run_id, tenant=self.tenant) is not None:
                raise RecordingError(
                    f"run {self.run_id!r} already exists in {self._store.url}; use resume to "
                    "continue it",
                    run_id=self.run_id,
                )
        except BaseException:
            self.release()
            raise
        session = Session(
            mode="record",
            run_id=self.run_id,
            actor=self.actor,
            recorder=recorder,
            key_secret=bytes.fromhex(self.key_secret),
            dry_run=self.dry_run,
            seed=self.seed,
        )
        payload: dict[str, Any] = {"input": self.input, "env": self.env}
        if self.parent is not None:
            payload["parent"] = self.parent
        labels = dict(self.labels)
        if self.dry_run:
            labels["tachograph.dry_run"] = "true"
        if labels:
            payload["labels"] = labels
        payload[KEY_SECRET_FIELD] = self.key_secret
        recorder.append(EventType.RUN_STARTED.value, payload)
        session.activate()
        self.run = Run(session, recorder, self._store)
        return self.run

    def _finish(self, exc_type: type[BaseException] | None, exc: BaseException | None) -> None:
        run = self.run
        assert run is not None
        run.session.deactivate()
        if exc is None:
            body: dict[str, Any] = {"status": "ok", "output": run.output}
        elif isinstance(exc, (KeyboardInterrupt, SystemExit)) or cancelled(exc):
            body = {"status": "aborted", "error": error_info(exc)}
        elif isinstance(exc, Exception):
            body = {"status": "error", "error": error_info(exc)}
        else:  # GeneratorExit and other BaseExceptions: leave the run open, as a crash would
            self.release()
            return
        run.status = body["status"]
        run.error = body.get("error")
        try:
            try:
                run.session.finish_unfinished()
                run.recorder.append(EventType.RUN_FINISHED.value, body)
            except ProfileError as bad:
                if exc is not None:
                    raise
                self._unrecordable_output(run, bad)
            run.recorder.flush()
            gone = store_gone(self._store)
            if gone is not None:
                # every event was acknowledged, and none is where anyone will read it
                raise WriteFailed(
                    f"run {run.run_id!r} was recorded into a store that is no longer there: "
                    f"{gone}; its events went with it",
                    run_id=run.run_id,
                )
        except Exception:
            # Never silent: a run that could not be finished on disk says so, even over the
            # agent's own exception (which stays attached as the context). Only a WriteFailed
            # that already escaped the agent is not reported twice.
            if not isinstance(exc, WriteFailed):
                raise
        finally:
            self.release()

    def release(self) -> None:
        """Close the store if this recording opened it (its writer thread and connection)."""
        if self._owns_store:
            self._owns_store = False
            if os.getpid() != self._pid:
                # a forked child: the store was opened by the parent, whose run goes on, and
                # closing its copy here could end what the parent uses (a PostgreSQL
                # connection's socket is shared with the parent)
                return
            release_store(self._store)

    @staticmethod
    def _unrecordable_output(run: Run, bad: ProfileError) -> None:
        """The agent returned something outside the JSON profile: finish the run as an error
        that says so (rather than leave it looking crashed), then raise it."""
        error = output_outside_profile(run.run_id, bad)
        run.status, run.error = "error", error_info(error)
        run.recorder.append(EventType.RUN_FINISHED.value, {"status": "error", "error": run.error})
        run.recorder.flush()
        raise error

    def __enter__(self) -> Run:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._finish(exc_type, exc)

    async def __aenter__(self) -> Run:
        return self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._finish(exc_type, exc)


@dataclass(frozen=True)
class RunResult:
    """What :func:`record_run` returns."""

    run_id: str
    status: str
    output: Any = None
    error: dict[str, Any] | None = None


def release_store(store: Store) -> None:
    """Write what is queued for ``store``, stop its writer thread and close it."""
    try:
        close_writer(store)
    finally:
        store.close()


def as_agent(target: Callable[..., Any] | Agent, actor: str | None) -> Agent:
    if isinstance(target, Agent):
        return target
    return Agent(fn=target, name=actor or str(getattr(target, "__name__", "agent")))


def record_run(
    target: Callable[..., Any] | Agent,
    input: Any = None,
    *,
    store: Store | str | os.PathLike[str] | None = None,
    actor: str | None = None,
    **options: Any,
) -> RunResult:
    """Record one call of an agent: ``agent(input)`` (sync or async) inside a run.

    The output is the agent's return value. An exception is recorded and propagates.
    Options are those of :class:`record`.
    """
    spec = as_agent(target, actor)
    rec = record(store, actor=actor or spec.name, input=input, agent=spec, **options)
    with rec as run:
        result = spec(input)
        if inspect.isawaitable(result):
            result = _run_coroutine(result)
        run.output = result
    return RunResult(run.run_id, run.status or "ok", run.output, run.error)


async def arecord_run(
    target: Callable[..., Any] | Agent,
    input: Any = None,
    *,
    store: Store | str | os.PathLike[str] | None = None,
    actor: str | None = None,
    **options: Any,
) -> RunResult:
    """The async form of :func:`record_run`, for use inside a running event loop."""
    spec = as_agent(target, actor)
    rec = record(store, actor=actor or spec.name, input=input, agent=spec, **options)
    async with rec as run:
        result = spec(input)
        if inspect.isawaitable(result):
            result = await result
        run.output = result
    return RunResult(run.run_id, run.status or "ok", run.output, run.error)


def _run_coroutine(coro: Any) -> Any:
    import asyncio  # here: asyncio is imported for an async agent only

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        # asyncio.run copies the current context into its task, so the session is visible.
        return asyncio.run(coro)
    raise RecordingError(
        "the agent is async and an event loop is already running: use 'await arecord_run(...)' "
        "or 'await areplay(...)' instead"
    )
