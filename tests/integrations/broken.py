"""A server on 127.0.0.1 that answers badly on purpose: cut off, truncated or late.

Each request takes the next :class:`Answer` of the server's list (the last one repeats): a
status line and headers, then the body's pieces as written, then the connection either ended
properly or cut (closed before the body's end). The SDKs meet what a real network does to
them: ``httpx2`` raises its own errors and the SDK wraps them, as live.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OPENAI_SNAPSHOT = "gpt-5.6-2026-09-30"
ANTHROPIC_SNAPSHOT = "claude-sonnet-5-20260930"


@dataclass(frozen=True)
class Answer:
    status: int = 200
    content_type: str = "application/json"
    pieces: Sequence[bytes] = ()
    cut: bool = False
    """Close the connection after the pieces, before the body's end."""
    length: int | None = None
    """A content-length (a body shorter than it is truncated); chunked when ``None``."""
    delay: float = 0.0
    """Seconds to wait before answering at all."""
    stall: float = 0.0
    """Seconds to wait after the pieces, before the body's end (or the cut)."""


@dataclass
class BrokenServer:
    answers: list[Answer]
    requests: list[str] = field(default_factory=list)
    url: str = ""


def chat_chunks(words: Sequence[str]) -> list[bytes]:
    """A chat-completions stream's events, one per word (no ``[DONE]``)."""
    return [
        b"data: "
        + json.dumps(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": OPENAI_SNAPSHOT,
                "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
            }
        ).encode()
        + b"\n\n"
        for word in words
    ]


def message_events(words: Sequence[str]) -> list[bytes]:
    """A messages stream's first events: its start, a text block, one delta per word."""
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": ANTHROPIC_SNAPSHOT,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": message}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
    ]
    events += [
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}},
        )
        for w in words
    ]
    return [f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events]


def chat_body(content: str = "hello") -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-2",
            "object": "chat.completion",
            "created": 1,
            "model": OPENAI_SNAPSHOT,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        }
    ).encode()


def message_body(text: str = "hello") -> bytes:
    return json.dumps(
        {
            "id": "msg_2",
            "type": "message",
            "role": "assistant",
            "model": ANTHROPIC_SNAPSHOT,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 1},
        }
    ).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        broken = self.server.broken
        broken.requests.append(self.path)
        answer = broken.answers[min(len(broken.requests), len(broken.answers)) - 1]
        if answer.delay:
            time.sleep(answer.delay)
        self.send_response(answer.status)
        self.send_header("content-type", answer.content_type)
        chunked = answer.length is None
        if chunked:
            self.send_header("transfer-encoding", "chunked")
        else:
            self.send_header("content-length", str(answer.length))
        self.end_headers()
        for piece in answer.pieces:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            self.wfile.flush()
        if answer.stall:
            time.sleep(answer.stall)
        if answer.cut:
            self.close_connection = True
            return
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, broken: BrokenServer) -> None:
        self.broken = broken
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up on a late answer is expected here."""


@contextmanager
def broken_server(*answers: Answer) -> Iterator[BrokenServer]:
    """Serve ``answers`` on 127.0.0.1 until the block ends."""
    broken = BrokenServer(list(answers))
    server = _Server(broken)
    broken.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.daemon = True
    thread.start()
    try:
        yield broken
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
