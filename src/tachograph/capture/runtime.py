"""What agent code calls: decorators for tools and models, decisions, clock, randomness.

The same agent code runs unchanged when recording, when replaying and when tachograph is off:
each of these functions asks the current :class:`~tachograph.capture.session.Session` (a context
variable) what to do, and outside any run simply does the plain thing.

.. code-block:: python

    @tachograph.tool(effect="irreversible", key=lambda a: a["order_id"])
    def issue_refund(order_id: str, amount_cents: int, idempotency_key: str | None = None): ...

    @tachograph.model("gpt-5.6-2026-09-30", provider="openai")
    def ask(request: dict) -> dict: ...

    with tachograph.record(store, actor="billing_agent", input=task) as run:
        run.output = agent(task)
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import inspect
import random
import re
import uuid
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from ..errors import ProfileError, RecordingError
from ..record.canonical import canonical
from ..record.event import Effect, EventType, check_type
from ..record.seal import prompt_hash
from ..record.seal import sha256_text as sha256_text  # kept where it was defined first
from .boundary import CURRENT_SESSION, MODEL_CALL, TOOL_CALL, CallTicket, wrap_call
from .session import current_session

__all__ = [
    "ModelAliasWarning",
    "ModelSpec",
    "ToolSpec",
    "accept_output",
    "decide",
    "emit",
    "external",
    "guardrail",
    "handoff",
    "model",
    "now",
    "prompt_hash",
    "reject_output",
    "rng",
    "select_plan",
    "tool",
    "uuid4",
]

F = TypeVar("F", bound=Callable[..., Any])

_ALIAS = re.compile(r"(latest|preview$|^[a-z-]+-\d(\.\d)?$|-(mini|nano|pro)$)", re.IGNORECASE)


class ModelAliasWarning(UserWarning):
    """A model was declared by an alias (e.g. ``latest``) instead of an exact, dated id."""


# -- tools ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolSpec:
    """A tool as declared: name, effect class, schema and version, key function, dry run."""

    name: str
    effect: Effect
    fn: Callable[..., Any]
    schema_version: str | None = None
    key: Callable[[dict[str, Any]], str] | None = None
    dry_run: Callable[..., Any] | None = None
    signature: inspect.Signature = field(repr=False, default=None)  # type: ignore[assignment]
    takes_key: bool = False
    is_async: bool = False

    @property
    def schema_hash(self) -> str:
        """A fingerprint of the tool's signature (names, kinds, annotations, defaults)."""
        params = []
        for p in self.signature.parameters.values():
            if p.name == "idempotency_key":
                continue
            params.append(
                {
                    "name": p.name,
                    "kind": p.kind.name,
                    "annotation": _annotation(p.annotation),
                    "default": None if p.default is p.empty else repr(p.default),
                }
            )
        schema = {
            "name": self.name,
            "params": params,
            "returns": _annotation(self.signature.return_annotation),
        }
        return "sha256:" + hashlib.sha256(canonical(schema)).hexdigest()

    def fingerprint(self) -> dict[str, Any]:
        """The ``tools`` entry of the environment fingerprint (SPEC section 7)."""
        return {"schema": self.schema_hash, "version": self.schema_version}

    @functools.cached_property
    def _plain_params(self) -> tuple[tuple[str, Any], ...] | None:
        """``(name, default)`` per parameter when every one is positional-or-keyword (the
        common tool), so that :meth:`bind` can skip ``Signature.bind``; else ``None``."""
        params = self.signature.parameters.values()
        if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
            return None
        return tuple((p.name, p.default) for p in params)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments as a JSON object (defaults applied, the key left out)."""
        plain = self._plain_params
        if plain is not None and len(args) <= len(plain):
            # the same dict Signature.bind + apply_defaults give, in parameter order; any
            # irregular call (unknown, missing or repeated argument) takes the slow path
            # below, which raises the usual TypeError
            out: dict[str, Any] = {}
            used = 0
            for i, (name, default) in enumerate(plain):
                if i < len(args):
                    if name in kwargs:
                        break
                    value = args[i]
                elif name in kwargs:
                    value = kwargs[name]
                    used += 1
                elif default is not inspect.Parameter.empty:
                    value = default
                else:
                    break
                if name != "idempotency_key":
                    out[name] = value
            else:
                if used == len(kwargs):
                    return out
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}(): {exc}") from None
        bound.apply_defaults()
        out = {}
        for name, value in bound.arguments.items():
            if name == "idempotency_key":
                continue
            kind = self.signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                value = list(value)
            elif kind is inspect.Parameter.VAR_KEYWORD:
                out.update(value)
                continue
            out[name] = value
        return out


def _annotation(annotation: Any) -> str | None:
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__qualname__", None) or repr(annotation)


_TOOLS: dict[str, ToolSpec] = {}


def _check_json(value: Any, where: str) -> None:
    try:
        canonical(value, where)
    except ProfileError as exc:
        raise ProfileError(str(exc), path=exc.fields.get("path")) from None


@overload
def tool(fn: F) -> F: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    effect: str | Effect = ...,
    schema_version: str | None = None,
    key: Callable[[dict[str, Any]], str] | None = None,
    dry_run: Callable[..., Any] | None = None,
) -> Callable[[F], F]: ...


def tool(
    fn: F | None = None,
    *,
    name: str | None = None,
    effect: str | Effect = Effect.IRREVERSIBLE,
    schema_version: str | None = None,
    key: Callable[[dict[str, Any]], str] | None = None,
    dry_run: Callable[..., Any] | None = None,
) -> F | Callable[[F], F]:
    """Declare a tool. Sync and async functions are both supported.

    ``effect`` is ``pure``, ``read``, ``write`` or ``irreversible`` (the default, because a
    tool nobody classified must be assumed to be dangerous). Before a ``write`` or
    ``irreversible`` tool runs, its ``tool.requested`` event is made durable. ``key`` derives the
    tool's own idempotency key part from the arguments (``{run_id}:{name}:{key(args)}``); a
    tool with an ``idempotency_key`` parameter receives the key. ``dry_run`` synthesizes a
    result from the same arguments when tools must not touch the world.
    """
    eff = Effect.parse(effect)

    def decorate(func: F) -> F:
        sig = inspect.signature(func)
        spec = ToolSpec(
            name=name or func.__name__,
            effect=eff,
            fn=func,
            schema_version=schema_version,
            key=key,
            dry_run=dry_run,
            signature=sig,
            takes_key="idempotency_key" in sig.parameters,
            is_async=inspect.iscoroutinefunction(func),
        )
        _TOOLS[spec.name] = spec

        def begin(
            args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> tuple[CallTicket | None, Callable[[], Any] | None]:
            session = CURRENT_SESSION.get()  # current_session(), without its frame
            if session is None:
                return None, _nothing
            # begin_call's work, less its look-up of the session and parsing of the enums
            ticket = session.begin_call(
                TOOL_CALL,
                spec.name,
                spec.bind(args, kwargs),
                effect=spec.effect,
                key=spec.key,
                schema_version=spec.schema_version,
            )
            if ticket.served:
                return ticket, _nothing  # the record answers: nothing will run
            # partial copies the keywords it is given: a copy here only to add the key
            call_kwargs = kwargs
            if spec.takes_key and ticket.key is not None and kwargs.get("idempotency_key") is None:
                call_kwargs = {**kwargs, "idempotency_key": ticket.key}
            if ticket.dry_run:
                return ticket, functools.partial(_dry_run, spec, (args, call_kwargs), ticket.key)
            if call_kwargs is kwargs:
                return ticket, None  # the call as it was made (a partial cost 0.3 us)
            return ticket, functools.partial(func, *args, **call_kwargs)

        wrapper = wrap_call(func, begin)
        wrapper.__tachograph_tool__ = spec  # type: ignore[attr-defined]
        return wrapper

    if fn is not None:
        return decorate(fn)
    return decorate


def _nothing() -> None:
    return None


def _dry_run(
    spec: ToolSpec, call_args: tuple[tuple[Any, ...], dict[str, Any]], key: str | None
) -> Any:
    if spec.dry_run is not None:
        kwargs = dict(call_args[1])
        if (
            "idempotency_key" in kwargs
            and "idempotency_key" not in inspect.signature(spec.dry_run).parameters
        ):
            kwargs.pop("idempotency_key")
        return spec.dry_run(*call_args[0], **kwargs)
    return {"dry_run": True, "status": "simulated", "tool": spec.name, "idempotency_key": key}


# -- models -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """A model edge as declared: the exact model id, provider, and converters."""

    model: str
    provider: str | None
    fn: Callable[..., Any]
    dump: Callable[[Any], Any] | None = None
    load: Callable[[Any], Any] | None = None


_MODELS: dict[str, ModelSpec] = {}


def _default_dump(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return value


def model(
    model_id: str,
    *,
    provider: str | None = None,
    dump: Callable[[Any], Any] | None = None,
    load: Callable[[Any], Any] | None = None,
) -> Callable[[F], F]:
    """Declare a model call with its exact model id.

    The call's request (a single dict argument, or the bound arguments) is recorded as sent
    with a ``prompt_hash``, before the call; the whole response after it (``model.response``)
    or the error (``model.failed``). The event's ``model`` is the id the response names, else
    the declared one. ``dump`` turns a response object into JSON (default: pydantic's
    ``model_dump``); ``load`` rebuilds the object from recorded JSON during replay.
    """
    if not isinstance(model_id, str) or not model_id:
        what = (
            f"the function {getattr(model_id, '__qualname__', '?')!r}"
            if callable(model_id)
            else repr(model_id)
        )
        raise RecordingError(
            f"@tachograph.model needs the exact model id first, not {what}: "
            "@tachograph.model('gpt-5.6-2026-08-07')"
        )
    if _ALIAS.search(model_id):
        warnings.warn(
            f"model {model_id!r} looks like an alias; declare the exact, dated model id so "
            "that a replay can tell when the model behind it changed",
            ModelAliasWarning,
            stacklevel=2,
        )

    def decorate(func: F) -> F:
        spec = ModelSpec(model_id, provider, func, dump or _default_dump, load)
        _MODELS[model_id] = spec
        sig = inspect.signature(func)

        def request_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            if len(args) == 1 and not kwargs and isinstance(args[0], dict):
                return args[0]
            bound = sig.bind(*args, **kwargs)
            return dict(bound.arguments)

        def begin(
            args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> tuple[CallTicket | None, Callable[[], Any]]:
            session = current_session()
            if session is None:
                return None, _nothing
            request = request_of(args, kwargs)
            seed = request.get("seed") if isinstance(request, dict) else None
            ticket = session.begin_call(
                MODEL_CALL,
                model_id,
                request,
                model=model_id,
                seed=seed if type(seed) is int else None,
            )
            return ticket, functools.partial(func, *args, **kwargs)

        def served(ticket: CallTicket) -> Any:
            value = ticket.answer()
            return spec.load(value) if spec.load is not None else value

        def finish(ticket: CallTicket, result: Any) -> Any:
            ticket.complete(spec.dump(result) if spec.dump is not None else result)
            return result

        wrapper = wrap_call(func, begin, served=served, finish=finish)
        wrapper.__tachograph_model__ = spec  # type: ignore[attr-defined]
        return wrapper

    return decorate


# -- decisions --------------------------------------------------------------------------------


def emit(type: str, payload: dict[str, Any] | None = None, *, durable: bool = False) -> None:
    """Record an event of any type (e.g. ``acme.review.queued``); compared during replay.

    Outside a run it checks the payload and does nothing else.
    """
    check_type(type)
    body = payload or {}
    session = current_session()
    if session is None:
        _check_json(body, "payload")
        return
    session.emit(type, body, durable=durable)


def _clean(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def select_plan(
    plan: Any, *, chosen_from: list[Any] | None = None, reason: str | None = None
) -> None:
    """Record ``plan.selected``: the plan the agent chose, among which, and why."""
    emit(EventType.PLAN_SELECTED.value, _clean(plan=plan, chosen_from=chosen_from, reason=reason))


def guardrail(
    name: str,
    *,
    stage: str,
    blocked: bool | None = None,
    passed: bool = False,
    reason: str | None = None,
) -> None:
    """Record a guardrail's verdict at ``stage`` (input, output or tool).

    ``passed=True`` records ``guardrail.passed`` (it ran and let the step through); otherwise
    ``guardrail.tripwire`` (it fired), where ``blocked`` says whether it stopped the step or
    only flagged it.
    """
    if stage not in ("input", "output", "tool"):
        raise RecordingError(f"guardrail stage {stage!r}: expected 'input', 'output' or 'tool'")
    if passed:
        if blocked:
            raise RecordingError(f"guardrail {name!r}: a guardrail that passed blocked nothing")
        emit(EventType.GUARDRAIL_PASSED.value, _clean(guardrail=name, stage=stage, reason=reason))
        return
    if blocked is None:
        raise RecordingError(
            f"guardrail {name!r}: say blocked=True or False for a tripwire, or passed=True"
        )
    emit(
        EventType.GUARDRAIL_TRIPWIRE.value,
        _clean(guardrail=name, stage=stage, blocked=bool(blocked), reason=reason),
    )


def accept_output(by: str, *, output: Any = None, reason: str | None = None) -> None:
    """Record ``output.accepted`` by a reviewer, evaluator or human."""
    emit(EventType.OUTPUT_ACCEPTED.value, _clean(by=by, output=output, reason=reason))


def reject_output(by: str, *, output: Any = None, reason: str | None = None) -> None:
    """Record ``output.rejected`` by a reviewer, evaluator or human."""
    emit(EventType.OUTPUT_REJECTED.value, _clean(by=by, output=output, reason=reason))


def handoff(to: str, *, from_: str | None = None, reason: str | None = None) -> None:
    """Record a ``handoff`` from the current actor (or ``from_``) to another agent."""
    session = current_session()
    source = from_ or (session.actor if session is not None else "agent")
    emit(EventType.HANDOFF.value, _clean(**{"from": source, "to": to, "reason": reason}))


def decide(
    name: str, chosen: Any, *, chosen_from: list[Any] | None = None, reason: str | None = None
) -> Any:
    """Record a generic ``decision`` and return ``chosen`` (so it can wrap an expression)."""
    emit(
        EventType.DECISION.value,
        _clean(name=name, chosen=chosen, chosen_from=chosen_from, reason=reason),
    )
    return chosen


# -- the world --------------------------------------------------------------------------------


def _parse_rfc3339(text: str) -> _dt.datetime:
    return _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def now() -> _dt.datetime:
    """The run's clock: a UTC datetime, recorded as ``clock.read`` and served back in replay."""
    session = current_session()
    if session is None:
        return _dt.datetime.now(_dt.timezone.utc)
    text = session.value(
        EventType.CLOCK_READ.value,
        {},
        lambda: _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    )
    return _parse_rfc3339(str(text))


def rng() -> Any:
    """The run's :class:`random.Random`, seeded once per run (``random.seed`` recorded).

    Outside a run, the module-level generator of :mod:`random`.
    """
    session = current_session()
    if session is None:
        return random._inst
    return session.rng()


def uuid4() -> Any:
    """A random UUID, recorded as ``random.value`` and served back in replay."""
    session = current_session()
    if session is None:
        return uuid.uuid4()
    return session.uuid4()


T = TypeVar("T")


def external(source: str, fetch: Callable[[], T], *, key: str | None = None) -> T:
    """Read something the world supplies (a row, a price, an HTTP body) through ``fetch``.

    Recorded as ``external.read``; in replay the recorded value is returned and ``fetch`` is
    not called. The value must be JSON (convert it in ``fetch``).
    """
    session = current_session()
    if session is None:
        return fetch()
    payload: dict[str, Any] = {"source": source}
    if key is not None:
        payload["key"] = key
    return session.value(EventType.EXTERNAL_READ.value, payload, fetch)  # type: ignore[no-any-return]


async def aexternal(source: str, fetch: Callable[[], Awaitable[T]], *, key: str | None = None) -> T:
    """The async form of :func:`external`."""
    session = current_session()
    if session is None:
        return await fetch()
    payload: dict[str, Any] = {"source": source}
    if key is not None:
        payload["key"] = key
    served, recorded = session.serve_value(EventType.EXTERNAL_READ.value, payload)
    if served:
        return recorded  # type: ignore[no-any-return]
    value = await fetch()
    session.record_value(EventType.EXTERNAL_READ.value, payload, value)
    return value


def registered_tools() -> dict[str, ToolSpec]:
    """Every tool declared in this process, by name."""
    return dict(_TOOLS)


def registered_models() -> dict[str, ModelSpec]:
    """Every model declared in this process, by id."""
    return dict(_MODELS)
