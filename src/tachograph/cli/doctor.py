"""``tacho doctor``: a store's health, with advice (checks in :mod:`tachograph.doctor`)."""

from __future__ import annotations

import sys

import click

from ..doctor import run_checks
from .app import EXIT_FAILED, emit_json, json_option, open_store
from .render import Output

__all__ = ["register"]

_STYLES = {"ok": "green", "warning": "yellow", "problem": "bold red"}


@click.command("doctor", short_help="Check a store's health and advise.")
@json_option
def doctor_cmd(as_json: bool) -> None:
    """Check the store: file integrity, verification of every run, file permissions and
    schema version, each finding with what to do. Exits 1 when a problem is found."""
    with open_store() as store:
        findings = run_checks(store)
        url = store.url
    problems = [f for f in findings if f.level == "problem"]
    if as_json:
        emit_json({"store": url, "ok": not problems, "findings": [f.to_dict() for f in findings]})
    else:
        out = Output()
        for finding in findings:
            out.line(
                f"{finding.level:<8} {finding.check}: {finding.message}", _STYLES[finding.level]
            )
            if finding.advice and finding.level != "ok":
                out.line(f"         advice: {finding.advice}")
    if problems:
        sys.exit(EXIT_FAILED)


def register(group: click.Group) -> None:
    """Add ``doctor`` to ``group``."""
    group.add_command(doctor_cmd)
