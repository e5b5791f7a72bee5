"""Replay: run the agent's own code against a recorded run (replay, fork, resume)."""

from __future__ import annotations

from .api import areplay, fork, replay, resume

__all__ = ["areplay", "fork", "replay", "resume"]
