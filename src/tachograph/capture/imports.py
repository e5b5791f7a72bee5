"""Importing a JSONL file as recording does: through the default processors.

:func:`tachograph.record.jsonl.import_jsonl` runs exactly the processors it is given (it sits
below the privacy layer and knows no defaults). This is the import of the facade
(:func:`tachograph.import_jsonl`) and of ``tacho import``: like ``record(...)`` it puts the
default redaction (:func:`tachograph.privacy.default_processors`) before the caller's
processors, so that an import cannot bring into a store what a recording would have kept out.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING

from ..privacy.redactor import default_processors
from ..record import jsonl
from ..record.jsonl import ImportReport
from ..record.seal import Processor

if TYPE_CHECKING:
    from ..store.base import Store

__all__ = ["import_jsonl"]


def import_jsonl(
    store: Store,
    source: str | os.PathLike[str] | IO[bytes],
    *,
    progress: Callable[[int], None] | None = None,
    processors: Sequence[Processor] = (),
    redact_secrets: bool = True,
) -> ImportReport:
    """Verify every run in the file, pass its payloads through the recording's processors
    (the default redaction first, unless ``redact_secrets=False``; with ``TACHOGRAPH_PII=on``
    the environment's PII policy), then store them all in one atomic unit.

    Keys and prompt hashes are derived again from the processed data; see
    :func:`tachograph.record.jsonl.import_jsonl` for what is refused and raised.
    """
    chain = default_processors(processors, redact_secrets=redact_secrets)
    return jsonl.import_jsonl(store, source, progress=progress, processors=chain)
