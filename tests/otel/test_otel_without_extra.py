"""A base install (no ``otel`` extra): one line naming the extra and exit 2, never a traceback.

OpenTelemetry is installed in the test environment, so each check runs in a fresh interpreter
in which an import hook makes every ``opentelemetry`` module unimportable, as on a base
install.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BLOCK = textwrap.dedent(
    """
    import sys

    class NoOpenTelemetry:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoOpenTelemetry())
    """
)

CLI = BLOCK + textwrap.dedent(
    """
    from tachograph.cli import main
    sys.argv = ["tacho", *sys.argv[1:]]
    main()
    """
)


def _python(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TACHOGRAPH_STORE", "FORCE_COLOR")}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def otlp_file(tmp_path: Path) -> Path:
    path = tmp_path / "traces.json"
    path.write_text(json.dumps({"resourceSpans": []}))
    return path


def test_the_block_really_hides_opentelemetry(tmp_path: Path) -> None:
    proc = _python(BLOCK + "import opentelemetry.trace\n", cwd=tmp_path)
    assert proc.returncode == 1
    assert "No module named 'opentelemetry'" in proc.stderr


@pytest.mark.parametrize(
    ("command", "args"),
    [("import", ["traces.json"]), ("export", ["run-a"])],
)
def test_otel_commands_say_one_line_naming_the_extra_and_exit_2(
    tmp_path: Path, otlp_file: Path, command: str, args: list[str]
) -> None:
    store = tmp_path / "runs.db"
    proc = _python(CLI, "--store", str(store), "otel", command, *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"Error: tacho otel {command} needs the 'otel' extra")
    assert "pip install 'tachograph[otel]'" in lines[0]
    assert proc.stdout == ""
    assert not store.exists()  # refused before any store was opened


def test_tachograph_otel_imports_and_names_the_extra_when_the_bridge_is_used(
    tmp_path: Path,
) -> None:
    code = BLOCK + textwrap.dedent(
        """
        import tachograph.otel as tgo
        from tachograph.otel.importer import import_otlp  # needs no OpenTelemetry
        assert not any(m.startswith("opentelemetry") for m in sys.modules)
        for use in (tgo.instrument, lambda: tgo.TachographSpanObserver):
            try:
                use()
            except ImportError as exc:
                print(exc)
            else:
                raise SystemExit("no ImportError")
        """
    )
    proc = _python(code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        assert "pip install 'tachograph[otel]'" in line
