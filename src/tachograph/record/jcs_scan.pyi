"""The compiled profile scan (``jcs_scan.c``): the answers of ``canonical._scan`` and of the
``.0`` drop, at a fraction of their cost."""

from typing import Any

def scan(value: Any, /) -> int: ...
def drop_dot_zero(data: bytes, count: int, /) -> bytes | None: ...
