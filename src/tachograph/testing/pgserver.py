"""A throwaway PostgreSQL cluster for tests and benchmarks: ``initdb`` into a temporary
directory, ``postgres`` on 127.0.0.1 and a free port, removed on :meth:`PgServer.stop`.

The server binaries are found through ``TACHOGRAPH_PG_BIN``, else ``pg_config --bindir``, else
Debian's ``/usr/lib/postgresql/<major>/bin``. PostgreSQL refuses to run as root; when this
process is root, the cluster runs as the unprivileged ``postgres`` user (``runuser``).

Also a command line, which CI uses to start a cluster and print its DSN::

    python -m tachograph.testing.pgserver start DIR    # prints the admin DSN
    python -m tachograph.testing.pgserver stop DIR
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PgServer", "find_bindir"]

_RUN_AS = "postgres"


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or ``None`` if there is none."""
    explicit = os.environ.get("TACHOGRAPH_PG_BIN")
    candidates: list[str] = [explicit] if explicit else []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True
            ).stdout
            candidates.append(out.strip())
        except (OSError, subprocess.CalledProcessError):
            pass
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for candidate in candidates:
        if candidate and (Path(candidate) / "initdb").is_file():
            return Path(candidate)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    """One cluster: ``dsn`` connects as its superuser (``postgres``) to database ``postgres``."""

    root: Path
    port: int
    bindir: Path

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @classmethod
    def start(cls, root: str | os.PathLike[str] | None = None) -> PgServer:
        """initdb and start a cluster under ``root`` (a new temporary directory by default)."""
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError("no PostgreSQL server binaries (initdb) found")
        base = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="tacho-pg-"))
        base.mkdir(parents=True, exist_ok=True)
        server = cls(base, _free_port(), bindir)
        server._initdb()
        server._pg_ctl(
            "start",
            "-w",
            "-t",
            "60",
            "-l",
            str(base / "server.log"),
            "-o",
            f"-c listen_addresses=127.0.0.1 -c port={server.port} "
            f"-c unix_socket_directories='{base}' -c max_connections=200 "
            "-c shared_buffers=128MB -c log_min_messages=warning",
        )
        (base / "port").write_text(str(server.port))
        return server

    @classmethod
    def attach(cls, root: str | os.PathLike[str]) -> PgServer:
        """The cluster :meth:`start` left under ``root``."""
        base = Path(root)
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError("no PostgreSQL server binaries (initdb) found")
        return cls(base, int((base / "port").read_text()), bindir)

    def _as_user(self, argv: list[str]) -> list[str]:
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            return ["runuser", "-u", _RUN_AS, "--", *argv]
        return argv

    def _initdb(self) -> None:
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            # The server runs as an unprivileged user, who must own (and reach) its files.
            shutil.chown(self.root, _RUN_AS, _RUN_AS)
            self.root.chmod(0o755)
        done = subprocess.run(
            self._as_user(
                [
                    str(self.bindir / "initdb"),
                    "-D",
                    str(self.datadir),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                ]
            ),
            capture_output=True,
            text=True,
            cwd=self.root,
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed in {self.root}: {done.stderr.strip()}")

    def _pg_ctl(self, *args: str) -> None:
        done = subprocess.run(
            self._as_user([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), *args]),
            capture_output=True,
            text=True,
            cwd=self.root,
        )
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"pg_ctl {args[0]} failed: {done.stderr.strip()}\n{tail}")

    def stop(self, *, remove: bool = True) -> None:
        """Stop the server (fast shutdown) and remove its files.

        A loaded machine can take longer than pg_ctl's default minute for the shutdown
        checkpoint of a cluster that many tests wrote to; the cluster is thrown away, so after
        two minutes an immediate shutdown (no checkpoint) finishes the job.
        """
        try:
            try:
                self._pg_ctl("stop", "-m", "fast", "-w", "-t", "120")
            except RuntimeError:
                self._pg_ctl("stop", "-m", "immediate", "-w", "-t", "60")
        finally:
            if remove:
                shutil.rmtree(self.root, ignore_errors=True)


def _main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tachograph.testing.pgserver start|stop DIR", file=sys.stderr)
        return 2
    command, root = argv
    if command == "start":
        server = PgServer.start(root)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        print(server.dsn)
        return 0
    PgServer.attach(root).stop(remove=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
