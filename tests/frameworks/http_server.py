"""A tiny shop API on 127.0.0.1 that counts every request it receives (stdlib only)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    disable_nagle_algorithm = True  # no delayed-ACK stall between the headers and the body

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("set-cookie", "session=secret")
        self.end_headers()
        self.wfile.write(data)

    def _count(self) -> None:
        with self.server.shop.lock:
            self.server.shop.requests.append((self.command, self.path))

    def do_HEAD(self) -> None:
        """``HEAD /raw/<name>``: the headers of ``GET /raw/<name>``, its length among them."""
        self._count()
        content_type, data = self.server.shop.raw[self.path.removeprefix("/raw/")]
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()

    def do_GET(self) -> None:
        self._count()
        if self.path.startswith("/raw/"):  # a body as given, under its content type
            content_type, data = self.server.shop.raw[self.path.removeprefix("/raw/")]
            self.send_response(200)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        order_id = self.path.split("?", 1)[0].rsplit("/", 1)[-1]
        total = self.server.shop.total
        self._reply(200, {"order_id": order_id, "status": "delivered", "total": total})

    def do_POST(self) -> None:
        self._count()
        size = int(self.headers.get("content-length") or 0)
        data = self.rfile.read(size)
        if self.path == "/uploads":  # any body (a multipart form): its size is the answer
            self._reply(201, {"upload_id": "up_1", "bytes": len(data)})
            return
        if self.path == "/slow":  # answers once released (or after 10 s), too late for a test
            self.server.shop.release.wait(10)
            try:
                self._reply(201, {"late": True})
            except OSError:  # the client gave up and closed the connection
                self.close_connection = True
            return
        body = json.loads(data or b"{}")
        with self.server.shop.lock:
            self.server.shop.refunds.append(body)
            number = len(self.server.shop.refunds)
        self._reply(201, {"refund_id": f"rf_{number}", **body})

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, shop: Shop) -> None:
        self.shop = shop
        super().__init__(("127.0.0.1", 0), _Handler)


class Shop:
    """``GET /orders/<id>``, ``POST /refunds`` and ``POST /uploads`` (any body); ``requests``
    counts what arrived. ``GET /raw/<name>`` answers ``raw[name]``, a ``(content type,
    bytes)`` pair, as it is. ``POST /slow`` answers only once ``release`` is set (by
    :meth:`stop` at the latest), for a client that gives up waiting.

    ``total`` is the total every order is said to have (a test changes it to change the
    shop's answer)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total = 19.99
        self.requests: list[tuple[str, str]] = []
        self.refunds: list[Any] = []
        self.raw: dict[str, tuple[str, bytes]] = {}
        self.release = threading.Event()
        self._httpd: _Server | None = _Server(self)
        host, port = self._httpd.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()

    def stop(self) -> int:
        """Stop serving (a leaked request is then refused) and return the request count."""
        self.release.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
            self._thread.join(timeout=5)
        return len(self.requests)
