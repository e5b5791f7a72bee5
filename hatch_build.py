"""Build hook: compiles ``src/tachograph/record/native.c`` (the hot-path helpers of
``tachograph.record``: the canonical encoder's profile scan, the stored-row format check, the
envelope's bytes, the construction of an event) into the wheel, or into the source tree for an
editable install.

The extension is optional. Where no C compiler or no Python headers are at hand, or when
``TACHOGRAPH_PURE_PYTHON=1`` is set, the build says why on stderr and the package falls back to
the same code in Python (the same bytes, slower): an install never fails for want of it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("src", "tachograph", "record", "native.c")


def _compile(source: Path, target: Path) -> str | None:
    """Compile ``source`` into the extension module ``target``; None, or why it failed."""
    include = sysconfig.get_paths().get("include")
    if not include or not Path(include, "Python.h").is_file():
        return f"no Python.h under {include!r}"
    linker = sysconfig.get_config_var("LDSHARED")
    if not linker:
        return "the interpreter names no shared-object linker (LDSHARED)"
    command = shlex.split(str(linker))
    if shutil.which(command[0]) is None:
        return f"no C compiler {command[0]!r} on PATH"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".tmp")
    # -pthread: verify_start checks a page on a POSIX thread of its own
    threads = ["-pthread"] if os.name == "posix" else []
    argv = [*command, "-fPIC", "-O2", *threads, "-I", include, str(source), "-o", str(partial)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{' '.join(argv)}: {exc}"
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        return f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-2000:]}"
    os.replace(partial, target)
    return None


class CompiledHelpersHook(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        if os.environ.get("TACHOGRAPH_PURE_PYTHON", "") not in ("", "0"):
            print("tachograph: TACHOGRAPH_PURE_PYTHON is set: nothing compiled", file=sys.stderr)
            return
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        source = Path(self.root, SOURCE)
        name = "native" + suffix
        if version == "editable":
            target = source.with_name(name)  # beside the sources the editable install runs
        else:
            target = Path(tempfile.mkdtemp(prefix="tachograph-build-"), name)
        problem = _compile(source, target)
        if problem is not None:
            print(
                f"tachograph: the compiled helpers were not built ({problem}); their Python "
                "twins serve instead (same bytes, slower)",
                file=sys.stderr,
            )
            return
        if version != "editable":
            build_data["force_include"][str(target)] = f"tachograph/record/{name}"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
