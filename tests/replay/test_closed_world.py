"""Closed-world replay: a connection or process the record does not hold is refused and
reported (host, port, the agent's line), unless the allow list lets it through.

The world is real: an HTTP server on 127.0.0.1 counts the requests it receives; the agent's
undecorated tool posts to it with urllib, http.client, httpx or asyncio streams."""

from __future__ import annotations

import asyncio
import http.client
import http.server
import inspect
import json
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

import tachograph as tg
from tachograph.errors import ReplayError, UnrecordedCall
from tachograph.replay.report import DivergenceKind

HERE = Path(__file__).name


class Counter(http.server.BaseHTTPRequestHandler):
    hits: list[str]

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        type(self).hits.append(self.path)
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, int, list[str]]]:
    hits: list[str] = []
    handler = type("Handler", (Counter,), {"hits": hits})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", httpd.server_address[1], hits
    finally:
        httpd.shutdown()
        httpd.server_close()


def post_urllib(host: str, port: int) -> str:
    req = urllib.request.Request(f"http://{host}:{port}/notify", data=b"{}", method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        return str(resp.status)


def post_http_client(host: str, port: int) -> str:
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request("POST", "/notify", body=b"{}")
        return str(conn.getresponse().status)
    finally:
        conn.close()


def post_httpx(host: str, port: int) -> str:
    with httpx2.Client(timeout=5) as client:
        return str(client.post(f"http://{host}:{port}/notify", content=b"{}").status_code)


def post_asyncio(host: str, port: int) -> str:
    async def go() -> str:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(
            f"POST /notify HTTP/1.1\r\nHost: {host}\r\ncontent-length: 2\r\n"
            "connection: close\r\n\r\n{}".encode()
        )
        await writer.drain()
        line = await reader.readline()
        writer.close()
        return line.split()[1].decode()

    return asyncio.run(go())


def make_agent(post: Callable[[str, int], str], host: str, port: int) -> Callable[[Any], Any]:
    @tg.tool(effect="read")
    def lookup(order: str) -> dict[str, Any]:
        return {"order": order, "total": 30}

    def notify() -> str:  # undecorated: the record does not know of it
        return post(host, port)

    def agent(task: Any) -> Any:
        found = lookup(order="A-1")
        status = notify()
        return {"found": found, "status": status}

    return agent


POSTS = [post_urllib, post_http_client, post_httpx, post_asyncio]


@pytest.mark.parametrize("post", POSTS, ids=lambda f: f.__name__)
def test_an_unrecorded_request_is_refused_and_reported(
    tmp_path: Path, server: tuple[str, int, list[str]], post: Callable[[str, int], str]
) -> None:
    host, port, hits = server
    agent = make_agent(post, host, port)
    store = tg.open_store(tmp_path / "runs.db")
    tg.record_run(agent, {"task": 1}, store=store, run_id="net-1")
    assert len(hits) == 1

    report = tg.replay(store, "net-1", agent)
    assert len(hits) == 1  # the world was not touched
    assert not report.reproduced
    first = report.first
    assert first is not None
    assert first.kind is DivergenceKind.UNRECORDED_CALL
    assert first.actual is not None
    detail = first.actual["payload"]
    assert detail["target"] == f"{host}:{port}"
    assert detail["port"] == port
    frame = detail["frame"]
    assert frame.startswith(__file__ + ":"), frame
    # the line of the agent's code that made the request, inside the posting function
    lines, start = inspect.getsourcelines(post)
    assert start <= int(frame.rsplit(":", 1)[1]) < start + len(lines), frame
    text = report.render()
    assert f"{host}:{port}" in text
    assert "unrecorded_call" in text
    assert "@tachograph.tool" in text
    assert report.to_dict()["first_divergence"]["kind"] == "unrecorded_call"
    if post is not post_asyncio:
        assert detail.get("method") == "POST"

    allowed = tg.replay(store, "net-1", agent, allow_network=[f"{host}:{port}"])
    assert len(hits) == 2  # let through on request
    assert allowed.reproduced, allowed.render()
    assert [c["target"] for c in allowed.allowed_calls] == [f"{host}:{port}"]
    assert "allowed: outbound call to" in allowed.render()
    assert allowed.to_dict()["allowed_calls"][0]["frame"].startswith(__file__)


def test_the_refusal_is_a_connection_refused_error(
    tmp_path: Path, server: tuple[str, int, list[str]]
) -> None:
    host, port, hits = server
    seen: list[BaseException] = []

    def agent(task: Any) -> Any:
        try:
            post_http_client(host, port)
        except ConnectionRefusedError as exc:
            seen.append(exc)
            return "offline"
        return "online"

    store = tg.open_store(tmp_path / "runs.db")
    tg.record_run(agent, None, store=store, run_id="net-2")
    report = tg.replay(store, "net-2", agent)
    assert len(hits) == 1
    assert isinstance(seen[0], UnrecordedCall)
    assert isinstance(seen[0], ReplayError)
    assert seen[0].target == f"{host}:{port}"
    kinds = [d.kind for d in report.divergences]
    assert kinds[0] is DivergenceKind.UNRECORDED_CALL
    assert DivergenceKind.OUTPUT_CHANGED in kinds  # "offline" now, "online" recorded


def test_a_subprocess_spawn_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "spawned"

    def agent(task: Any) -> Any:
        subprocess.run([sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')"], check=True)
        return "done"

    store = tg.open_store(tmp_path / "runs.db")
    tg.record_run(agent, None, store=store, run_id="proc-1")
    assert marker.read_text() == "x"
    report = tg.replay(store, "proc-1", agent)
    assert marker.read_text() == "x"  # not spawned again
    first = report.first
    assert first is not None
    assert first.kind is DivergenceKind.UNRECORDED_CALL
    assert first.actual is not None
    assert first.actual["type"] == "process.spawn"
    assert first.actual["payload"]["target"] == sys.executable
    exe = Path(sys.executable).name
    allowed = tg.replay(store, "proc-1", agent, allow_network=[f"exec:{exe}"])
    assert marker.read_text() == "xx"
    assert allowed.reproduced, allowed.render()


def test_other_threads_are_not_guarded(tmp_path: Path, server: tuple[str, int, list[str]]) -> None:
    """The guard judges the replaying context only: a thread of the host process (here a
    plain thread with its own context) keeps its network while a replay runs."""
    host, port, _hits = server
    started, done = threading.Event(), threading.Event()
    results: list[str] = []

    def elsewhere() -> None:
        started.wait(5)
        results.append(post_http_client(host, port))
        done.set()

    def agent(task: Any) -> Any:
        started.set()
        done.wait(5)
        return "ok"

    store = tg.open_store(tmp_path / "runs.db")
    tg.record_run(lambda task: "ok", None, store=store, run_id="t-1", actor="agent")
    thread = threading.Thread(target=elsewhere)
    thread.start()
    report = tg.replay(store, "t-1", agent)
    thread.join(5)
    assert results == ["200"]
    assert report.reproduced, report.render()


def test_fork_guards_only_the_served_part(
    tmp_path: Path, server: tuple[str, int, list[str]]
) -> None:
    host, port, hits = server
    agent = make_agent(post_http_client, host, port)
    store = tg.open_store(tmp_path / "runs.db")
    tg.record_run(agent, None, store=store, run_id="f-1")
    events = list(store.read("f-1"))
    completed = next(e.seq for e in events if e.type == "tool.completed")
    # After the tool's answer the fork is live: the request goes out and is recorded as made.
    report = tg.fork(store, "f-1", completed, agent)
    assert len(hits) == 2
    assert report.final_status == "ok", report.render()
    assert not [d for d in report.divergences if d.kind is DivergenceKind.UNRECORDED_CALL]


def test_a_bad_allow_list_entry_names_the_forms(tmp_path: Path) -> None:
    store = tg.open_store(tmp_path / "runs.db")
    tg.record_run(lambda task: "ok", None, store=store, run_id="b-1", actor="agent")
    with pytest.raises(ReplayError, match="HOST:PORT"):
        tg.replay(store, "b-1", lambda task: "ok", allow_network=["localhost"])


def test_the_cli_refuses_and_allows_with_allow_network(
    tmp_path: Path,
    server: tuple[str, int, list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json

    from click.testing import CliRunner

    from tachograph.cli.app import cli

    host, port, hits = server
    (tmp_path / "cw_net_agent.py").write_text(
        "import http.client\n"
        "def agent(task):\n"
        f"    conn = http.client.HTTPConnection({host!r}, {port}, timeout=5)\n"
        "    conn.request('POST', '/notify', body=b'{}')\n"
        "    return conn.getresponse().status\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("TACHOGRAPH_STORE", raising=False)
    import cw_net_agent

    db = tmp_path / "runs.db"
    with tg.open_store(db, create=True) as store:
        tg.record_run(cw_net_agent.agent, None, store=store, run_id="cli-net", actor="agent")
    assert len(hits) == 1
    runner = CliRunner()
    base = ["--store", str(db), "replay", "cli-net", "--agent", "cw_net_agent:agent"]
    refused = runner.invoke(cli, [*base, "--json"], catch_exceptions=False)
    assert refused.exit_code == 1
    data = json.loads(refused.stdout)
    assert data["first_divergence"]["kind"] == "unrecorded_call"
    assert data["first_divergence"]["actual"]["payload"]["frame"].endswith("cw_net_agent.py:4")
    assert len(hits) == 1
    allowed = runner.invoke(
        cli, [*base, "--allow-network", f"{host}:{port}"], catch_exceptions=False
    )
    assert allowed.exit_code == 0, allowed.output
    assert len(hits) == 2
    assert f"allowed: outbound call to {host}:{port}" in allowed.stdout


def test_the_standard_library_asking_the_system_about_itself_is_not_refused(
    tmp_path: Path,
) -> None:
    # platform.processor() runs ``uname -p`` once per process; the OpenAI SDK calls it on
    # its first request, so a replay in a fresh process must not call that an unrecorded call
    import platform

    def agent(task: Any) -> Any:
        platform._uname_cache = None  # type: ignore[attr-defined]  # as in a fresh process
        return {"cpu": bool(platform.processor() or True)}

    db = tmp_path / "runs.db"
    tg.record_run(agent, "x", store=db, run_id="plat")
    report = tg.replay(db, "plat", agent)
    assert report.reproduced, report.render()


def test_a_refused_call_reports_no_secret_of_its_url_or_command(
    tmp_path: Path, server: tuple[str, int, list[str]]
) -> None:
    """The report (text and JSON) and the error raised into the agent show an unrecorded
    call's URL and command line with their credentials hidden, as a recording would."""
    host, port, hits = server
    key = "AIzaSyA1234567890abcdefghijklmnopqrstu"
    bearer = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
    marker = tmp_path / "spawned"

    def agent(task: Any) -> Any:
        url = f"http://{host}:{port}/notify?key={key}&q=1"
        req = urllib.request.Request(url, data=b"{}", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                status = resp.status
        except OSError as exc:
            status = str(exc)
        code = f"open({str(marker)!r}, 'a').write('x')  # Authorization: Bearer {bearer}"
        try:
            subprocess.run([sys.executable, "-c", code], check=True)
        except OSError as exc:
            return {"status": status, "spawn": str(exc)}
        return {"status": status}

    store = tg.open_store(tmp_path / "runs.db")
    tg.record_run(agent, None, store=store, run_id="secret-1")
    assert len(hits) == 1
    assert marker.read_text() == "x"

    report = tg.replay(store, "secret-1", agent, collect=True)
    assert len(hits) == 1
    assert marker.read_text() == "x"
    refused = [d for d in report.divergences if d.kind is DivergenceKind.UNRECORDED_CALL]
    assert [d.actual["type"] for d in refused if d.actual] == ["network.connect", "process.spawn"]
    shown = report.render() + json.dumps(report.to_dict()) + json.dumps(report.output)
    assert key not in shown
    assert bearer not in shown
    assert "[redacted:secret:" in shown
    assert "q=1" in shown  # the rest of the URL is still there to read


def test_a_refused_shell_line_hides_a_key_in_its_first_word(tmp_path: Path) -> None:
    """``os.system("API_KEY=sk-... ./tool")``: the target is the line's first word, an
    assignment holding the key; the report, its hint and the error hid the command's key
    but not the target's."""
    import os

    secret = "sk-proj-" + "Zy9Xw8Vu7Ts6" * 3

    def agent(task: Any) -> Any:
        return os.system(f"API_KEY={secret} true")

    store = tg.open_store(tmp_path / "runs.db")
    tg.record_run(agent, None, store=store, run_id="sh-1")
    report = tg.replay(store, "sh-1", agent)
    first = report.first
    assert first is not None
    assert first.kind is DivergenceKind.UNRECORDED_CALL
    shown = report.render() + json.dumps(report.to_dict())
    assert secret not in shown
    assert "[redacted:secret:" in shown


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_childs_os_exit_ends_the_child_not_the_replay(tmp_path: Path) -> None:
    """The child of a fork the replay lets through inherits the guard's context: its
    ``os._exit`` must end the child (it was refused there, and the child went on running
    the replay's caller)."""
    import os

    marker = tmp_path / "after-exit"

    def agent(task: Any) -> Any:
        pid = os.fork()
        if pid == 0:
            try:
                os._exit(7)
            finally:
                marker.write_text("the child went on")  # reached only if _exit returned
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)

    store = tg.open_store(tmp_path / "runs.db")
    assert tg.record_run(agent, None, store=store, run_id="fork-1").output == 7
    report = tg.replay(store, "fork-1", agent, allow_network=["exec:fork"])
    assert report.output == 7, report.render()
    assert not marker.exists()
