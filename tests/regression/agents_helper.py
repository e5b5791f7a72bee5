"""The demo's ``billing_agent_v2``, in a module that starts a helper program as it is imported
in a worker process (a language server, a local model, a sandbox an agent's module might
start), writing the helper's process id as a line of the file ``TACHOGRAPH_TEST_HELPER_LOG``
names. The helper waits ten minutes: for a test that it ends with a Ctrl-C, as a program
started from a terminal does."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

from tachograph.demo.agent import billing_agent_v2

__all__ = ["billing_agent_v2"]

_LOG = os.environ.get("TACHOGRAPH_TEST_HELPER_LOG")
if _LOG and multiprocessing.parent_process() is not None:
    _HELPER = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(_LOG, "a", encoding="utf-8") as out:
        out.write(f"{_HELPER.pid}\n")
