"""Loading agents by import path (kept here for the CLI; see :mod:`tachograph.capture.loader`)."""

from __future__ import annotations

from ..capture.loader import load_agent

__all__ = ["load_agent"]
