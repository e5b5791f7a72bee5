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
import {module}
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _probe(probe: str, module: str, python: str, env: dict[str, str]) -> list[str]:
    """The module names ``probe`` prints after importing ``module`` in a fresh interpreter."""
    out = subprocess.run(
        [python, "-c", probe.format(module=module)],
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


@pytest.mark.parametrize(
    "module", ["tachograph", "tachograph.store", "tachograph.record.jsonl", "tachograph.testing"]
)
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
import {module}
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
