"""What ``tacho verify`` loads and starts before it verifies: each is time in front of the
work, in a fresh process (the modules a command imports can only be seen there)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

_PROBE = """
import contextlib, io, json, sys
from tachograph.cli import main
out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
code = 0
with contextlib.redirect_stdout(out):
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
out.flush()
text = out.buffer.getvalue().decode()
print(json.dumps({"code": code, "out": text, "modules": sorted(sys.modules)}))
"""


def _tacho_in_probe(python: str, env: dict[str, str], *argv: str) -> dict[str, object]:
    done = subprocess.run(
        [python, "-c", _PROBE, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_verify_loads_the_witness_client_only_when_a_witness_is_named(
    store_path: Path, tmp_path: Path, python: str, child_env: dict[str, str]
) -> None:
    # The witness module brings an HTTP client and server: a verification that consults no
    # witness reads its seal verdicts without them.
    plain = _tacho_in_probe(python, child_env, "--store", str(store_path), "verify", "--json")
    assert plain["code"] == 0, plain["out"]
    assert json.loads(str(plain["out"]))["ok"] is True
    modules = set(plain["modules"])  # type: ignore[call-overload]
    assert "tachograph.sealing.log" in modules  # the seal verdicts were read
    assert {"tachograph.sealing.witness", "http.server", "urllib.request"} & modules == set()

    named = _tacho_in_probe(
        python,
        child_env,
        "--store",
        str(store_path),
        "verify",
        "--witness",
        str(tmp_path / "no-witness-here"),
        "--json",
    )
    assert named["code"] == 2  # a mistyped witness folder is a usage error ...
    assert "tachograph.sealing.witness" in set(named["modules"])  # type: ignore[call-overload]
