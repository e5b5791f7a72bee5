"""Shared fixtures: the golden vectors (vendored), hypothesis settings, helper scripts."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import tachograph

# The golden vectors are vendored in tests/vectors (a fresh clone runs every test); when the
# clone sits beside a copy of shared/, tests/test_vectors_vendored.py checks they are equal.
VECTORS_DIR = Path(__file__).resolve().parent / "vectors"
SHARED_VECTORS_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "vectors"
HELPERS_DIR = Path(__file__).resolve().parent / "helpers"

# Tests never assert wall-clock time; hypothesis deadlines would be exactly that.
settings.register_profile("tachograph", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "tachograph"))


def _missing_vectors() -> str | None:
    if (VECTORS_DIR / "README.md").is_file():
        return None
    return (
        f"golden vectors not found at {VECTORS_DIR}: they are part of the repository "
        "(tests/vectors/README.md); restore them with git checkout tests/vectors"
    )


@pytest.fixture(scope="session")
def vectors_dir() -> Path:
    """``tests/vectors``, the vendored golden vectors."""
    missing = _missing_vectors()
    if missing is not None:
        pytest.skip(missing)
    return VECTORS_DIR


def _params(names: list[str]) -> list[object]:
    missing = _missing_vectors()
    if missing is not None:
        return [pytest.param("(absent)", marks=pytest.mark.skip(reason=missing))]
    return list(names)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize over vector files by name: ``jcs_case`` and ``invalid_case``."""
    if "jcs_case" in metafunc.fixturenames:
        inputs = VECTORS_DIR / "jcs" / "input"
        names = sorted(p.stem for p in inputs.glob("*.json")) if inputs.is_dir() else []
        metafunc.parametrize("jcs_case", _params(names))
    if "invalid_case" in metafunc.fixturenames:
        expected = VECTORS_DIR / "events" / "invalid" / "expected.json"
        names = sorted(json.loads(expected.read_text())) if expected.is_file() else []
        metafunc.parametrize("invalid_case", _params(names))


@pytest.fixture(scope="session")
def child_env() -> dict[str, str]:
    """Environment for helper processes: they import the same tachograph as the tests."""
    src = str(Path(tachograph.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("TACHOGRAPH_STORE", None)
    return env


@pytest.fixture(scope="session")
def python() -> str:
    """The interpreter running the tests, for helper processes."""
    return sys.executable
