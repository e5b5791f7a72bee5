"""Closed-world replay of calls that open no connection: a request sent on a keep-alive
connection an HTTP client opened before the replay (recording, then replaying in one
process), and the name lookup before a connection. Both reached the world and the replay
said REPRODUCED; now each is refused and reported, unless the allow list lets it through.

The world is real: an HTTP/1.1 server on 127.0.0.1 that keeps its connections open counts
the requests it receives."""

from __future__ import annotations

import http.client
import http.server
import inspect
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import requests

import tachograph as tg
from tachograph.errors import UnrecordedCall
from tachograph.replay.report import DivergenceKind

from .test_closed_world import Counter


class KeepAlive(Counter):
    """The closed-world tests' counting server, keeping its connections open."""

    protocol_version = "HTTP/1.1"  # the connection stays open between requests


@pytest.fixture
def server() -> Iterator[tuple[str, int, list[str]]]:
    hits: list[str] = []
    handler = type("Handler", (KeepAlive,), {"hits": hits})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", httpd.server_address[1], hits
    finally:
        httpd.shutdown()
        httpd.server_close()


class HttpClient:
    """One http.client connection, kept: the agent's requests reuse it."""

    def __init__(self, host: str, port: int) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=5)

    def post(self) -> int:
        try:
            self.conn.request("POST", "/notify", body=b"{}")
            response = self.conn.getresponse()
            response.read()
        except OSError:
            self.conn.close()  # a failed request leaves the connection half used
            raise
        return response.status

    def close(self) -> None:
        self.conn.close()


class Requests:
    def __init__(self, host: str, port: int) -> None:
        self.url, self.session = f"http://{host}:{port}/notify", requests.Session()

    def post(self) -> int:
        return self.session.post(self.url, data=b"{}", timeout=5).status_code

    def close(self) -> None:
        self.session.close()


class Httpx:
    def __init__(self, host: str, port: int) -> None:
        self.url, self.client = f"http://{host}:{port}/notify", httpx2.Client(timeout=5)

    def post(self) -> int:
        return self.client.post(self.url, content=b"{}").status_code

    def close(self) -> None:
        self.client.close()


CLIENTS: list[Callable[[str, int], Any]] = [HttpClient, Requests, Httpx]


def make_agent(client: Any) -> Callable[[Any], Any]:
    @tg.tool(effect="read")
    def lookup(order: str) -> dict[str, Any]:
        return {"order": order}

    def agent(task: Any) -> Any:
        found = lookup(order="A-1")
        status = client.post()  # undecorated: the record does not hold it
        return {"found": found, "status": status}

    return agent


@pytest.mark.parametrize("make", CLIENTS, ids=lambda c: c.__name__)
def test_a_request_on_a_connection_opened_before_the_replay_is_refused(
    tmp_path: Path, server: tuple[str, int, list[str]], make: Callable[[str, int], Any]
) -> None:
    host, port, hits = server
    client = make(host, port)
    try:
        agent = make_agent(client)
        store = tg.open_store(tmp_path / "runs.db")
        tg.record_run(agent, None, store=store, run_id="pool-1")
        assert len(hits) == 1  # the connection is open now, in the client's pool

        report = tg.replay(store, "pool-1", agent)
        assert len(hits) == 1, hits  # the world was not touched
        assert not report.reproduced
        first = report.first
        assert first is not None
        assert first.actual is not None
        assert first.kind is DivergenceKind.UNRECORDED_CALL
        assert first.actual["type"] == "network.send"
        detail = first.actual["payload"]
        assert detail["target"] == f"{host}:{port}"
        assert detail.get("method") == "POST"
        lines, start = inspect.getsourcelines(type(client).post)
        frame = detail["frame"]
        assert frame.startswith(__file__ + ":"), frame
        assert start <= int(frame.rsplit(":", 1)[1]) < start + len(lines), frame
        assert "opened before the replay" in report.render()

        allowed = tg.replay(store, "pool-1", agent, allow_network=[f"{host}:{port}"])
        assert allowed.reproduced, allowed.render()
        assert len(hits) == 2
        assert [c["target"] for c in allowed.allowed_calls] == [f"{host}:{port}"]
    finally:
        client.close()


def test_an_allowed_connection_is_reported_once_however_many_requests_it_carries(
    tmp_path: Path, server: tuple[str, int, list[str]]
) -> None:
    host, port, hits = server
    client = HttpClient(host, port)
    try:

        def agent(task: Any) -> Any:
            return [client.post() for _ in range(3)]

        store = tg.open_store(tmp_path / "runs.db")
        tg.record_run(agent, None, store=store, run_id="pool-2")
        report = tg.replay(store, "pool-2", agent, allow_network=[f"{host}:{port}"])
        assert report.reproduced, report.render()
        assert len(hits) == 6
        assert len(report.allowed_calls) == 1
    finally:
        client.close()


def test_a_host_name_lookup_is_refused_before_it_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked_up: list[Any] = []
    lookup = socket.getaddrinfo

    def spy(host: Any, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(host)
        return lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", spy)  # the guard wraps what it finds
    seen: list[BaseException] = []

    def agent(task: Any) -> Any:
        try:
            requests.get("http://unrecorded.invalid:8081/", timeout=5)
        except requests.ConnectionError as exc:
            seen.append(exc)
        # an address written out, or localhost, never leaves the machine to be looked up
        socket.getaddrinfo("127.0.0.1", 80)
        socket.getaddrinfo("localhost", 80)
        return "done"

    def quiet(task: Any) -> Any:
        return "done"

    store = tg.open_store(tmp_path / "runs.db")
    tg.record_run(quiet, None, store=store, run_id="dns-1")
    report = tg.replay(store, "dns-1", agent)
    assert "unrecorded.invalid" not in looked_up, looked_up
    assert "127.0.0.1" in looked_up
    assert "localhost" in looked_up
    assert len(seen) == 1
    first = report.first
    assert first is not None
    assert first.actual is not None
    assert first.kind is DivergenceKind.UNRECORDED_CALL
    assert first.actual["type"] == "network.resolve"
    detail = first.actual["payload"]
    assert detail["host"] == "unrecorded.invalid"
    # the agent's line, not urllib3's (whose name ends in a digit)
    assert detail["frame"].startswith(__file__ + ":"), detail["frame"]
    assert len([d for d in report.divergences if d.kind is DivergenceKind.UNRECORDED_CALL]) == 1

    def bare(task: Any) -> Any:
        try:
            socket.getaddrinfo("unrecorded.invalid", 443)
        except UnrecordedCall as exc:
            return str(exc)
        return "resolved"

    refused = tg.replay(store, "dns-1", bare, collect=True)
    assert "lookup of unrecorded.invalid:443" in str(refused.output)

    # the name's own entry lets the lookup through (its connection is judged after)
    def port_8081(task: Any) -> Any:
        try:
            socket.getaddrinfo("unrecorded.invalid", 8081)
        except UnrecordedCall:
            return "refused"
        except OSError:  # looked up, and not found
            return "done"
        return "done"

    looked_up.clear()
    allowed = tg.replay(store, "dns-1", port_8081, allow_network=["unrecorded.invalid:8081"])
    assert allowed.reproduced, allowed.render()
    assert looked_up == ["unrecorded.invalid"]


def _self_signed(where: Path) -> tuple[Path, Path]:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = where / "cert.pem", where / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def _tls_server(tmp_path: Path) -> tuple[http.server.ThreadingHTTPServer, Path, list[str]]:
    import ssl

    cert, key = _self_signed(tmp_path)
    hits: list[str] = []
    handler = type("Handler", (KeepAlive,), {"hits": hits})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    httpd.socket = server_side.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, cert, hits


def _trusting(cert: Path) -> Any:
    """A client's TLS context that trusts ``cert`` (a self-signed one, for 127.0.0.1)."""
    import ssl

    client_side = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_side.check_hostname = False
    client_side.load_verify_locations(cert)
    return client_side


def test_a_request_on_a_tls_connection_opened_before_the_replay_is_refused(
    tmp_path: Path,
) -> None:
    """An SSL socket sends through its own ``send``, not the plain socket's."""
    httpd, cert, hits = _tls_server(tmp_path)
    client_side = _trusting(cert)
    conn = http.client.HTTPSConnection(
        "127.0.0.1", httpd.server_address[1], timeout=5, context=client_side
    )
    try:

        def agent(task: Any) -> Any:
            conn.request("POST", "/notify", body=b"{}")
            response = conn.getresponse()
            response.read()
            return response.status

        store = tg.open_store(tmp_path / "runs.db")
        tg.record_run(agent, None, store=store, run_id="tls-1")
        assert len(hits) == 1
        report = tg.replay(store, "tls-1", agent)
        assert len(hits) == 1, hits
        first = report.first
        assert first is not None
        assert first.actual is not None
        assert first.actual["type"] == "network.send", report.render()
    finally:
        conn.close()
        httpd.shutdown()
        httpd.server_close()


def test_an_allowed_name_covers_its_tls_connection(tmp_path: Path) -> None:
    """The TLS socket is a new object over the connection the allow list let through by
    name: its sends are that connection's (they were judged again, by address, and refused)."""

    httpd, cert, hits = _tls_server(tmp_path)
    port = httpd.server_address[1]
    client_side = _trusting(cert)

    def agent(task: Any) -> Any:
        conn = http.client.HTTPSConnection("localhost", port, timeout=5, context=client_side)
        try:
            conn.request("POST", "/notify", body=b"{}")
            response = conn.getresponse()
            response.read()
            return response.status
        finally:
            conn.close()

    try:
        store = tg.open_store(tmp_path / "runs.db")
        tg.record_run(agent, None, store=store, run_id="tls-2")
        report = tg.replay(store, "tls-2", agent, allow_network=[f"localhost:{port}"])
        assert report.reproduced, report.render()
        assert len(hits) == 2
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_other_ways_out_are_refused(tmp_path: Path, server: tuple[str, int, list[str]]) -> None:
    """sendmsg on a connection opened before the replay, and the other name lookups:
    gethostbyname, gethostbyaddr and getnameinfo of an address that is not this machine's."""
    host, port, hits = server
    before = socket.create_connection((host, port))

    def quiet(task: Any) -> Any:
        return "done"

    ways: dict[str, Callable[[], Any]] = {
        "sendmsg": lambda: before.sendmsg([b"POST /x HTTP/1.1\r\n\r\n"]),
        "gethostbyname": lambda: socket.gethostbyname("unrecorded.invalid"),
        "gethostbyaddr": lambda: socket.gethostbyaddr("192.0.2.1"),
        "getnameinfo": lambda: socket.getnameinfo(("192.0.2.1", 80), 0),
    }
    try:
        store = tg.open_store(tmp_path / "runs.db")
        tg.record_run(quiet, None, store=store, run_id="ways")
        for name, way in ways.items():

            def agent(task: Any, way: Callable[[], Any] = way) -> Any:
                try:
                    way()
                except UnrecordedCall:
                    return "done"
                return "went out"

            report = tg.replay(store, "ways", agent, collect=True)
            kinds = [d.kind for d in report.divergences]
            assert kinds == [DivergenceKind.UNRECORDED_CALL], (name, report.render())
        # this machine's own address is answered by the hosts file
        tg.replay(store, "ways", lambda task: socket.gethostbyaddr("127.0.0.1") and "done")
        assert hits == []
    finally:
        before.close()


def test_a_lookup_needs_its_own_name_allowed(tmp_path: Path) -> None:
    """A lookup is a query of the name: an address allowed on the port does not let any
    name out (its name could carry data); the name's own entry does, a service's port by
    its number."""

    def look(task: Any) -> Any:
        try:
            socket.getaddrinfo("exfil-data.invalid", "https")
        except UnrecordedCall:
            return "refused"
        except OSError:
            return "looked up"
        return "looked up"

    store = tg.open_store(tmp_path / "runs.db")
    tg.record_run(lambda task: "refused", None, store=store, run_id="dns-2")
    refused = tg.replay(store, "dns-2", look, allow_network=["127.0.0.1:443"])
    assert refused.output == "refused"
    assert refused.first is not None
    assert refused.first.kind is DivergenceKind.UNRECORDED_CALL
    named = tg.replay(store, "dns-2", look, allow_network=["exfil-data.invalid:443"])
    assert named.output == "looked up"


def test_the_standard_librarys_logging_handlers_keep_their_sockets(tmp_path: Path) -> None:
    """A syslog handler set up by the host before the replay writes to /dev/log's socket:
    logging is the host's, not the agent acting on the world (every replay diverged)."""
    import logging
    import logging.handlers

    path = str(tmp_path / "devlog")
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(path)
    handler = logging.handlers.SysLogHandler(address=path)
    logger = logging.getLogger("tachograph-test-syslog")
    logger.addHandler(handler)
    logger.propagate = False

    def agent(task: Any) -> Any:
        logger.warning("refund for %s", task)
        return "done"

    try:
        store = tg.open_store(tmp_path / "runs.db")
        tg.record_run(agent, "A-1", store=store, run_id="log-1")
        assert sink.recv(4096).endswith(b"refund for A-1\x00")
        report = tg.replay(store, "log-1", agent)
        assert report.reproduced, report.render()
        assert sink.recv(4096).endswith(b"refund for A-1\x00")
    finally:
        logger.removeHandler(handler)
        handler.close()
        sink.close()


def test_a_send_on_a_unix_socket_opened_before_is_named_as_a_send(tmp_path: Path) -> None:
    path = str(tmp_path / "ipc.sock")
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(path)
    before = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    before.connect(path)
    try:
        store = tg.open_store(tmp_path / "runs.db")
        tg.record_run(lambda task: "done", None, store=store, run_id="ipc")

        def agent(task: Any) -> Any:
            try:
                before.send(b"x")
            except UnrecordedCall:
                return "done"
            return "sent"

        report = tg.replay(store, "ipc", agent)
        first = report.first
        assert first is not None
        assert first.actual is not None
        assert first.actual["type"] == "network.send"
        assert f"unix:{path}" in report.render()
    finally:
        before.close()
        sink.close()
