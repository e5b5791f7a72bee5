"""Output that cannot be written: ``| head`` stops reading (the pipe closes) or ``> file`` on
a full disk. A closed pipe exits 141, as it ends other tools (128 + SIGPIPE), quietly: it
exited 1, "does not verify", or 0 or 120 depending on when the pipe closed. A write that
fails is an error on stderr and exit 2, not a traceback. Real ``tacho`` processes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tachograph.cli.app import EXIT_OK, EXIT_PIPE, EXIT_USAGE

from .conftest import read_and_close


@pytest.mark.parametrize(
    "args",
    [
        ("export", "--all"),
        ("show", "long"),
        ("show", "long", "--json"),
        # not `state`: its fold keeps the last decision of a name, a short output that may
        # be written whole before the reader goes (then 0 is right)
    ],
)
def test_a_reader_that_goes_away_ends_the_command_with_141_quietly(
    tacho_exe: str, child_env: dict[str, str], long_store: Path, args: tuple[str, ...]
) -> None:
    env = {k: v for k, v in child_env.items() if k != "TACHOGRAPH_STORE"}
    whole = subprocess.run(
        [tacho_exe, "--store", str(long_store), *args], capture_output=True, env=env, check=False
    )
    assert whole.returncode == EXIT_OK, whole.stderr
    code, err = read_and_close(tacho_exe, env, "--store", str(long_store), *args)
    assert code == EXIT_PIPE, err
    assert err == ""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args", [("runs",), ("show", "long"), ("show", "long", "--json"), ("export", "long")]
)
def test_a_full_disk_under_stdout_is_an_error_not_a_traceback(
    tacho_exe: str, child_env: dict[str, str], long_store: Path, args: tuple[str, ...]
) -> None:
    env = {k: v for k, v in child_env.items() if k != "TACHOGRAPH_STORE"}
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [tacho_exe, "--store", str(long_store), *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            check=False,
        )
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "Error: cannot write the output: No space left on device" in done.stderr
    assert "Traceback" not in done.stderr
