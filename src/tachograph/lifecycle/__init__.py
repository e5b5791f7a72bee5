"""The data lifecycle: erasure, data subjects, retention, blobs and purpose-scoped reads.

The names below are imported from their modules on first use (a verification worker that
checks blobs loads :mod:`tachograph.lifecycle.blobs` alone); import the modules by their
full path::

    from tachograph.lifecycle.erasure import erase
    from tachograph.lifecycle.retention import load_policy, plan, apply
    from tachograph.lifecycle.blobs import BlobStore, BlobRule
    from tachograph.lifecycle.purpose import scoped

See docs/privacy.md.
"""

from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
    from .audit import (
        AuditReport,
        current_actor,
        list_audit,
        verify_audit,
    )
    from .blobs import (
        BlobCheck,
        BlobInfo,
        BlobRule,
        BlobStore,
        check_blobs,
        check_stored_blobs,
    )
    from .erasure import (
        ErasureReport,
        RunErasure,
        SubjectRule,
        erase,
        link_subject,
    )
    from .purpose import (
        DEFAULT_POLICY,
        DEFAULT_PURPOSE,
        PurposePolicy,
        PurposeRule,
        ScopedStore,
        scoped,
    )
    from .retention import (
        DEFAULT_RETENTION,
        RetentionPlan,
        RetentionPolicy,
        apply,
        plan,
    )

_LAZY: dict[str, str] = {
    "AuditReport": ".audit",
    "current_actor": ".audit",
    "list_audit": ".audit",
    "verify_audit": ".audit",
    "BlobCheck": ".blobs",
    "BlobInfo": ".blobs",
    "BlobRule": ".blobs",
    "BlobStore": ".blobs",
    "check_blobs": ".blobs",
    "check_stored_blobs": ".blobs",
    "ErasureReport": ".erasure",
    "RunErasure": ".erasure",
    "SubjectRule": ".erasure",
    "erase": ".erasure",
    "link_subject": ".erasure",
    "DEFAULT_POLICY": ".purpose",
    "DEFAULT_PURPOSE": ".purpose",
    "PurposePolicy": ".purpose",
    "PurposeRule": ".purpose",
    "ScopedStore": ".purpose",
    "scoped": ".purpose",
    "DEFAULT_RETENTION": ".retention",
    "RetentionPlan": ".retention",
    "RetentionPolicy": ".retention",
    "apply": ".retention",
    "plan": ".retention",
}


def __getattr__(name: str) -> typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "DEFAULT_POLICY",
    "DEFAULT_PURPOSE",
    "DEFAULT_RETENTION",
    "AuditReport",
    "BlobCheck",
    "BlobInfo",
    "BlobRule",
    "BlobStore",
    "ErasureReport",
    "PurposePolicy",
    "PurposeRule",
    "RetentionPlan",
    "RetentionPolicy",
    "RunErasure",
    "ScopedStore",
    "SubjectRule",
    "apply",
    "check_blobs",
    "check_stored_blobs",
    "current_actor",
    "erase",
    "link_subject",
    "list_audit",
    "plan",
    "scoped",
    "verify_audit",
]
