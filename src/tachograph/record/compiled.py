"""The compiled helpers (``native.c``), when they are built and wanted.

``NATIVE`` is the ``tachograph.record.native`` extension module, or ``None`` where it was not
built (no C compiler at install) or where ``TACHOGRAPH_PURE_PYTHON`` is set to anything but
``0`` when tachograph is imported: the Python code it replaces then serves, with the same
results (the tests hold each compiled helper to its Python twin).
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["NATIVE", "PURE_PYTHON_ENV"]

PURE_PYTHON_ENV = "TACHOGRAPH_PURE_PYTHON"


def _load() -> ModuleType | None:
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        from . import native
    except ImportError:
        return None
    return native


NATIVE: ModuleType | None = _load()
