"""The fake model's script for the Google ADK refund agent of ``examples/google_adk_refund``."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from fakes.llm_server import Reply, ScriptRequest, ToolCall, default_script

# The agent lives in the repository's examples/ (importable from the root, as `tacho test`
# imports it from the current directory); the tests import the same module.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from examples import google_adk_refund as example  # noqa: E402

__all__ = ["example", "script"]


def _first_user_text(request: ScriptRequest) -> str:
    # ADK quotes the other agent's turns as user text: the order is in the first user turn.
    for message in request.body.get("messages", []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        for block in content or []:
            if isinstance(block, dict) and block.get("type") == "text":
                return str(block.get("text", ""))
    return request.user_text


def script(request: ScriptRequest) -> Any:
    """Triage transfers to billing, billing runs the refund loop, a thank-you is answered."""
    if request.user_text.startswith("Thanks"):
        return Reply(text="You are welcome.")
    if "transfer_to_agent" in request.tools and "lookup_order" not in request.tools:
        return Reply(tool_calls=[ToolCall("transfer_to_agent", {"agent_name": "billing"})])
    return default_script(dataclasses.replace(request, user_text=_first_user_text(request)))
