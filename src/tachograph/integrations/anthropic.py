"""Record and replay the official Anthropic Python SDK (``pip install 'tachograph[anthropic]'``).

One line records every call an ``Anthropic`` or ``AsyncAnthropic`` client makes (messages,
streaming with ``stream=True`` or the ``client.messages.stream(...)`` helper, tool use, token
counting, ...) inside a tachograph run::

    from anthropic import Anthropic
    from tachograph.integrations.anthropic import instrument

    client = instrument(Anthropic())

Recording happens at the client's HTTP transport (see :mod:`tachograph.integrations.transport`),
below the SDK's middleware and retry loop: each HTTP attempt is one model call. In a replay the
same client answers from the record and no HTTP request leaves the process; the SDK builds its
own ``Message`` objects, stream events and exceptions (``RateLimitError``,
``OverloadedError``, ...) from the recorded bytes. Outside a run the client behaves exactly as
before.

The SDK injects W3C trace context (``traceparent``) into requests when OpenTelemetry is
active; it is not recorded, so it cannot make a replay diverge.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

try:
    import anthropic as _anthropic
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "tachograph.integrations.anthropic needs the anthropic SDK: "
        "pip install 'tachograph[anthropic]'"
    ) from exc

from .transport import DEFAULT_REQUEST_HEADERS, Provider, install, installed, uninstall

__all__ = ["DEFAULT_REQUEST_HEADERS", "instrument", "is_instrumented", "uninstrument"]

C = TypeVar("C")


def _check(client: Any) -> None:
    if not isinstance(client, (_anthropic.Anthropic, _anthropic.AsyncAnthropic)):
        raise TypeError(
            "instrument() expects an anthropic.Anthropic or anthropic.AsyncAnthropic client, "
            f"got {type(client).__name__}"
        )


def instrument(
    client: C,
    *,
    request_headers: Iterable[str] = DEFAULT_REQUEST_HEADERS,
    fast_retries: bool = True,
) -> C:
    """Record (and replay) every HTTP call of an Anthropic client; returns the same client.

    The client is changed in place, so copies made with ``client.with_options(...)`` or
    ``client.with_middleware(...)``, before or after, are recorded too. ``request_headers``
    names the request headers that are recorded and compared in replay (by default
    ``anthropic-beta`` and ``openai-beta``); credentials, ``anthropic-version`` (fixed by the
    SDK version) and the SDK's telemetry headers are not. With ``fast_retries`` a replayed
    error that the SDK retries tells it to wait one millisecond instead of the recorded delay.
    """
    _check(client)
    provider = Provider(
        name="anthropic",
        make_error=getattr(client, "_make_status_error_from_response", None),
        should_retry=getattr(client, "_should_retry", None),
        # An ``event: error`` arrives with HTTP 200, so the SDK raises the generic status error.
        stream_error_type="anthropic.APIStatusError",
    )
    return install(client, provider, request_headers=request_headers, fast_retries=fast_retries)


def uninstrument(client: C) -> C:
    """Stop recording ``client``: restore the transport :func:`instrument` wrapped."""
    _check(client)
    return uninstall(client)


def is_instrumented(client: Any) -> bool:
    """Whether ``client`` records through tachograph."""
    return installed(client)
