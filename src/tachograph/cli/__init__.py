"""The ``tacho`` command line (needs click and rich, imported only here).

``tacho = "tachograph.cli:main"``. The root group and its conventions are in :mod:`.app`.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``tacho`` with ``argv`` (default: the process arguments)."""
    from .app import main as run

    run(argv)
