"""The compiled helpers (``native.c``), when they are built and wanted.

``NATIVE`` is the ``tachograph.record.native`` extension module, or ``None`` where it was not
built (no C compiler at install) or where ``TACHOGRAPH_PURE_PYTHON`` is set to anything but
``0`` when tachograph is imported: the Python code it replaces then serves, with the same
results (the tests hold each compiled helper to its Python twin).

Its SHA-256 digests use ``SHA256_Init``, ``_Update`` and ``_Final`` of the OpenSSL libcrypto
that hashlib runs on, where that is a shared library already loaded (found by its soname, else
in the process's map: :func:`libcrypto_of_hashlib`; :data:`SHA256_FROM` names it; a process
with another OpenSSL loaded under the same soname would use that one), and
hashlib's ``sha256`` otherwise: the same digests either way (``native.bind_sha256`` checks
two known answers before it uses the library, and never loads one).
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["NATIVE", "PURE_PYTHON_ENV", "SHA256_FROM", "libcrypto_of_hashlib"]

PURE_PYTHON_ENV = "TACHOGRAPH_PURE_PYTHON"


def libcrypto_of_hashlib() -> str | None:
    """The file of the shared OpenSSL libcrypto mapped into this process once hashlib's
    ``_hashlib`` is loaded (read from Linux's ``/proc/self/maps``), or None: no such file (an
    OpenSSL linked statically, another system)."""
    try:
        import _hashlib  # noqa: F401  (maps the libcrypto it is linked to)
    except ImportError:
        return None
    try:
        with open("/proc/self/maps", "rb") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) == 6 and fields[5].rsplit(b"/", 1)[-1].startswith(b"libcrypto.so"):
                    return os.fsdecode(fields[5].rstrip(b"\n"))
    except OSError:
        return None
    return None


def _load() -> ModuleType | None:
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        from . import native
    except ImportError:
        return None
    return native


NATIVE: ModuleType | None = _load()

SHA256_FROM: str | None = None
"""The libcrypto (its soname, or its file) whose SHA-256 the compiled helpers use, or None:
hashlib's."""

_SONAMES = ("libcrypto.so.3", "libcrypto.so.1.1")
"""OpenSSL's libcrypto by the names the dynamic linker knows it by, tried before the map of
the process is read (which costs a hundred times more)."""


def _bind_sha256(native: ModuleType) -> str | None:
    try:
        import _hashlib  # noqa: F401  (maps the libcrypto it is linked to)
    except ImportError:
        return None
    for name in _SONAMES:
        if native.bind_sha256(name):
            return name
    path = libcrypto_of_hashlib()
    if path is not None and native.bind_sha256(path):
        return path
    return None


if NATIVE is not None:
    try:
        SHA256_FROM = _bind_sha256(NATIVE)
    except Exception:  # a speed-up never stops the import: hashlib's SHA-256 serves
        SHA256_FROM = None
