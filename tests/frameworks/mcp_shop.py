"""The MCP shop server of ``examples/`` started the ways the tests need it: a stdio
subprocess (started by the MCP client itself) or a streamable HTTP server on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the examples package lives at the repository root
    sys.path.insert(0, str(ROOT))

SERVER_SCRIPT = ROOT / "examples" / "mcp_shop_server.py"


def count(path: Path) -> int:
    """The number in a counter file (0 when it does not exist)."""
    return int(path.read_text()) if path.exists() else 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HttpShop:
    """The shop over streamable HTTP, in a subprocess bound to 127.0.0.1."""

    def __init__(self, counter: Path, starts: Path, *, total: str | None = None) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        env = dict(os.environ, SHOP_COUNTER=str(counter), SHOP_STARTS=str(starts))
        if total is not None:
            env["SHOP_TOTAL"] = total
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER_SCRIPT), "http", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the MCP shop exited with {self.process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("the MCP shop did not start listening") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> HttpShop:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
