"""Importing tachograph stays light: no CLI, OpenTelemetry, database driver, SDK or web stack."""

from __future__ import annotations

import json
import subprocess

import pytest

FORBIDDEN = {
    "click",
    "rich",
    "opentelemetry",
    "psycopg",
    "psycopg2",
    "openai",
    "anthropic",
    "httpx",
    "httpx2",
    "agents",
    "langchain_core",
    # web frameworks and servers
    "aiohttp",
    "bottle",
    "django",
    "falcon",
    "fastapi",
    "flask",
    "litestar",
    "pyramid",
    "quart",
    "sanic",
    "starlette",
    "tornado",
    "uvicorn",
    "werkzeug",
}

_PROBE = """
import json, sys
before = set(sys.modules)
{statement}
print(json.dumps(sorted(set(sys.modules) - before)))
"""

# The facade is lazy: its names are imported on first use, so the whole of it is loaded with
# ``from tachograph import *`` (which reads every name of ``__all__``).
_STATEMENTS = {
    "tachograph": "import tachograph\nfrom tachograph import *",
    "tachograph.store": "import tachograph.store",
    "tachograph.record.jsonl": "import tachograph.record.jsonl",
    "tachograph.testing": "import tachograph.testing",
}


def _probe(
    probe: str, module: str, python: str, env: dict[str, str], statement: str | None = None
) -> list[str]:
    """The module names ``probe`` prints after importing ``module`` in a fresh interpreter."""
    if statement is None:
        statement = _STATEMENTS.get(module, f"import {module}")
    out = subprocess.run(
        [python, "-c", probe.format(statement=statement)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    ).stdout
    names: list[str] = json.loads(out)
    return names


def _imported_by(module: str, python: str, env: dict[str, str]) -> set[str]:
    return {name.split(".")[0] for name in _probe(_PROBE, module, python, env)}


@pytest.mark.parametrize("module", sorted(_STATEMENTS))
def test_import_does_not_pull_in_heavy_or_optional_packages(
    module: str, python: str, child_env: dict[str, str]
) -> None:
    roots = _imported_by(module, python, child_env)
    assert "tachograph" in roots  # the probe sees what it imports
    assert "orjson" in roots
    assert sorted(roots & FORBIDDEN) == []


def test_the_probe_would_notice(python: str, child_env: dict[str, str]) -> None:
    assert "click" in _imported_by("click", python, child_env)


_FULL_PROBE = """
import json, sys
{statement}
print(json.dumps(sorted(sys.modules)))
"""


def test_import_leaves_asyncio_and_package_metadata_for_first_use(
    python: str, child_env: dict[str, str]
) -> None:
    # asyncio (with ssl and socket's event loops) and importlib.metadata were a third of the
    # time `import tachograph` took; an async agent, a replay's network guard and the code
    # version of a recorded agent import them when they first need them
    def loaded(module: str) -> set[str]:
        return set(_probe(_FULL_PROBE, module, python, child_env))

    assert {"asyncio", "importlib.metadata"} & loaded("tachograph") == set()
    assert "asyncio" in loaded("asyncio")  # the probe would notice


def test_the_facade_loads_a_layer_only_when_a_name_of_it_is_read(
    python: str, child_env: dict[str, str]
) -> None:
    # A verification worker imports tachograph.store.parallel, which runs the facade's
    # __init__ first: that must not load the capture, replay, privacy or lifecycle layers.
    bare = set(_probe(_PROBE, "", python, child_env, statement="import tachograph"))
    layers = {name for name in bare if name.startswith("tachograph.")}
    assert layers <= {"tachograph._version", "tachograph.errors"}, sorted(layers)
    store = set(_probe(_PROBE, "tachograph.store.parallel", python, child_env))
    assert {
        n.split(".")[1] for n in store if n.count(".") >= 1 and n.startswith("tachograph.")
    } <= {
        "_version",
        "errors",
        "record",
        "store",
    }
    full = set(_probe(_PROBE, "tachograph", python, child_env))
    assert {"tachograph.capture.agent", "tachograph.replay.engine"} <= full


_SHADOW_PROBE = """
import tachograph.record.event, tachograph.replay.engine, tachograph
from tachograph import record, replay
print(type(tachograph.record).__name__, type(tachograph.replay).__name__,
      record is tachograph.record, replay is tachograph.replay)
"""


def test_the_facade_names_that_are_also_subpackages_stay_the_facade_names(
    python: str, child_env: dict[str, str]
) -> None:
    # Importing the subpackages tachograph.record and tachograph.replay first binds them on
    # the package; the facade still answers with the context manager and the function.
    out = subprocess.run(
        [python, "-c", _SHADOW_PROBE],
        capture_output=True,
        text=True,
        env=child_env,
        check=True,
        timeout=120,
    ).stdout.split()
    assert out == ["type", "function", "True", "True"]


def _loaded_by_every_name(package: str, python: str, env: dict[str, str]) -> set[str]:
    """The modules that reading every name of a lazy ``package`` loads, once the probe has
    checked that each name is there and that its lazy table names exactly ``__all__``."""
    statement = (
        f"import {package} as s\n"
        "assert all(getattr(s, n) is not None for n in s.__all__)\n"
        "assert sorted(s._LAZY) == sorted(s.__all__)"
    )
    return set(_probe(_PROBE, "", python, env, statement=statement))


def test_reading_a_seal_verdict_loads_no_witness_or_web_client(
    python: str, child_env: dict[str, str]
) -> None:
    # tacho verify, tacho show and replay read a run's seal verdict: the sealing package
    # loads its witness (urllib.request, http.server, email, ssl) only when a name of it is
    # read, and every name of the package is still there.
    verdict = set(_probe(_PROBE, "tachograph.sealing.verdict", python, child_env))
    assert "tachograph.sealing.verdict" in verdict  # the probe sees what it imports
    assert {
        "tachograph.sealing.witness",
        "tachograph.sealing.policy",
        "tachograph.sealing.evidence",
        "http.server",
        "urllib.request",
    } & verdict == set()
    every = _loaded_by_every_name("tachograph.sealing", python, child_env)
    assert {"tachograph.sealing.witness", "http.server"} <= every


def test_a_worker_checking_blobs_loads_no_other_lifecycle_module(
    python: str, child_env: dict[str, str]
) -> None:
    # A verification worker unpickles a BlobScan: tachograph.lifecycle.blobs, not the
    # package's erasure, retention, purpose and audit modules; every name of the package is
    # still there.
    blobs = set(_probe(_PROBE, "tachograph.lifecycle.blobs", python, child_env))
    assert "tachograph.lifecycle.blobs" in blobs  # the probe sees what it imports
    others = {f"tachograph.lifecycle.{m}" for m in ("erasure", "retention", "purpose", "audit")}
    assert others & blobs == set()
    every = _loaded_by_every_name("tachograph.lifecycle", python, child_env)
    assert others <= every


def test_the_read_commands_and_erasure_load_no_redactor(
    python: str, child_env: dict[str, str]
) -> None:
    # tacho verify, runs and show start a new process each time (and tacho verify --all's
    # figure counts it): the privacy package compiles its detectors when imported (50 ms),
    # so erasure and the read commands import it only to erase a subject or for --actor.
    for module in ("tachograph.cli.commands_inspect", "tachograph.lifecycle.erasure"):
        loaded = set(_probe(_PROBE, module, python, child_env))
        assert module in loaded  # the probe sees what it imports
        assert "tachograph.privacy.redactor" not in loaded, module
