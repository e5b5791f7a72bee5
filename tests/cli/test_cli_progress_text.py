"""The progress bar's description names a file or a run: untrusted text. rich's markup in it
(``[blink red]``) is shown as written, and control characters escaped, as everywhere else."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from tachograph.cli import render


def test_a_progress_description_is_neither_markup_nor_raw_control_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(render, "_surely_not_a_terminal", lambda stream: False)
    out = render.Output()
    buffer = io.StringIO()
    out.__dict__["err"] = Console(
        file=buffer, force_terminal=True, width=120, color_system="standard"
    )
    assert out.err_is_terminal
    with out.progress(3, "verifying [blink red on white]X\x1b]0;PWNED\x07.jsonl") as advance:
        advance(1)
    shown = buffer.getvalue()
    assert "[blink red on white]X" in shown  # the markup as written
    assert "\x1b[5" not in shown  # no blink applied
    assert "\x1b]0;" not in shown  # no title set
    assert "\\x1b]0;PWNED\\x07" in shown
