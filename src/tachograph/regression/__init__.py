"""Regression replay: a corpus of recorded runs replayed against the agent's current code."""

from __future__ import annotations

from .runner import (
    FIXTURE_VERSION,
    SIDECAR_SUFFIX,
    CaseResult,
    CorpusError,
    CorpusReport,
    CorpusRun,
    Outcome,
    Verdict,
    check_run,
    junit_xml,
    load_corpus,
    save_run,
    test_corpus,
)

__all__ = [
    "FIXTURE_VERSION",
    "SIDECAR_SUFFIX",
    "CaseResult",
    "CorpusError",
    "CorpusReport",
    "CorpusRun",
    "Outcome",
    "Verdict",
    "check_run",
    "junit_xml",
    "load_corpus",
    "save_run",
    "test_corpus",
]
