"""Times as the record writes them (``YYYY-MM-DDTHH:MM:SS.ffffffZ``) and back."""

from __future__ import annotations

import datetime
import math

__all__ = ["format_ts", "parse_ts", "shift"]

_UTC = datetime.timezone.utc


def format_ts(moment: datetime.datetime) -> str:
    """``moment`` (naive means UTC) in the record's timestamp format."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(_UTC).replace(tzinfo=None)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_ts(text: str) -> datetime.datetime:
    """A record timestamp (or any ISO 8601 time; no offset means UTC) as an aware datetime."""
    moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_UTC)
    return moment.astimezone(_UTC)


def shift(ts: str, seconds: float) -> str | None:
    """``ts`` plus ``seconds`` as a record timestamp; ``None`` for an infinite span."""
    if math.isinf(seconds):
        return None
    try:
        return format_ts(parse_ts(ts) + datetime.timedelta(seconds=seconds))
    except OverflowError:
        return None
