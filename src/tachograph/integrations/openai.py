"""Record and replay the official OpenAI Python SDK (``pip install 'tachograph[openai]'``).

One line records every call an ``OpenAI`` or ``AsyncOpenAI`` client makes (chat completions,
the responses API, embeddings, ...; streaming or not) inside a tachograph run::

    from openai import OpenAI
    from tachograph.integrations.openai import instrument

    client = instrument(OpenAI())

Recording happens at the client's HTTP transport (see :mod:`tachograph.integrations.transport`):
the request is kept as sent, the answer whole (a stream event by event), the exact model that
answered is pinned on the ``model.response`` event and the token usage is kept. In a replay the
same client answers from the record and no HTTP request leaves the process; the SDK builds its
own objects, streams and exceptions from the recorded bytes, and its retry loop runs again on
the recorded errors. Outside a run the client behaves exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

try:
    import openai as _openai
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "tachograph.integrations.openai needs the openai SDK: pip install 'tachograph[openai]'"
    ) from exc

from .transport import DEFAULT_REQUEST_HEADERS, Provider, install, installed, uninstall

__all__ = ["DEFAULT_REQUEST_HEADERS", "instrument", "is_instrumented", "uninstrument"]

C = TypeVar("C")


def _check(client: Any) -> None:
    if not isinstance(client, (_openai.OpenAI, _openai.AsyncOpenAI)):
        raise TypeError(
            f"instrument() expects an openai.OpenAI or openai.AsyncOpenAI client (or a "
            f"subclass such as AzureOpenAI), got {type(client).__name__}"
        )


def instrument(
    client: C,
    *,
    request_headers: Iterable[str] = DEFAULT_REQUEST_HEADERS,
    fast_retries: bool = True,
) -> C:
    """Record (and replay) every HTTP call of an OpenAI client; returns the same client.

    The client is changed in place, so copies made with ``client.with_options(...)``, before
    or after, are recorded too. ``request_headers`` names the request headers that are
    recorded and compared in replay (by default ``openai-beta`` and ``anthropic-beta``);
    credentials and the SDK's own telemetry headers are never recorded. With
    ``fast_retries`` a replayed error that the SDK retries tells it to wait one millisecond
    instead of the recorded delay; the same attempts and exceptions happen either way.
    """
    _check(client)
    provider = Provider(
        name="openai",
        make_error=getattr(client, "_make_status_error_from_response", None),
        should_retry=getattr(client, "_should_retry", None),
        stream_error_type="openai.APIError",
    )
    return install(client, provider, request_headers=request_headers, fast_retries=fast_retries)


def uninstrument(client: C) -> C:
    """Stop recording ``client``: restore the transport :func:`instrument` wrapped."""
    _check(client)
    return uninstall(client)


def is_instrumented(client: Any) -> bool:
    """Whether ``client`` records through tachograph."""
    return installed(client)
