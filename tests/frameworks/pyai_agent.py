"""The fake model's script for the pydantic-ai refund agent of ``examples/pydantic_ai_refund``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fakes.llm_server import Reply, ScriptRequest, ToolCall, default_script

# The agent lives in the repository's examples/ (importable from the root, as `tacho test`
# imports it from the current directory); the tests import the same module.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from examples import pydantic_ai_refund as example  # noqa: E402

__all__ = ["example", "script"]


def script(request: ScriptRequest) -> Any:
    """Triage delegates to billing, billing runs the refund loop, a thank-you is answered."""
    if request.user_text.startswith("Thanks"):
        return Reply(text="You are welcome.")
    if "ask_billing" in request.tools:
        answered = request.result_for("ask_billing")
        if answered is None:
            return Reply(tool_calls=[ToolCall("ask_billing", {"request": request.user_text})])
        return Reply(text=f"Billing says: {answered.output}")
    return default_script(request)
