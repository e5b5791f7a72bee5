"""Record the corpus of one run per agent framework into corpus/<framework>/.

Each framework's agent lives in ``examples/`` (importable from the repository root, needing
nothing from the tests); it is recorded here against the fake model server of the tests on
127.0.0.1, with the refund counter in a temporary folder, and saved with verdict ``good``.
``tacho test corpus/<framework> --agent examples.<module>:agent`` then replays it with no
server running (the record serves every model call and tool). Run from the repository root:

    python scripts/make_framework_corpus.py pydantic_ai [--out corpus]

``httpx`` has no model: its agent calls a shop API, served here on 127.0.0.1:8765 (the
example's default ``SHOP_URL``, so that the replay's requests are the recorded ones).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import tachograph as tg  # noqa: E402
from fakes.llm_server import FakeLLMServer  # noqa: E402
from tachograph.regression.runner import save_run  # noqa: E402

# framework -> (example module, script (module:attr in tests/), run id, note)
FRAMEWORKS: dict[str, tuple[str, str, str, str]] = {
    "pydantic_ai": (
        "examples.pydantic_ai_refund",
        "frameworks.pyai_agent:script",
        "pydantic-ai-good-refund-b2002",
        "pydantic-ai triage delegates to billing, which looks B-2002 up and refunds it",
    ),
    "google_adk": (
        "examples.google_adk_refund",
        "frameworks.adk_agent:script",
        "google-adk-good-refund-b2002",
        "Google ADK triage transfers to billing, which looks B-2002 up and refunds it",
    ),
    "openai_agents": (
        "examples.openai_agents_refund",
        "frameworks.agents_sdk:script",
        "openai-agents-good-refund-b2002",
        "Agents SDK triage hands off to billing, which looks B-2002 up and refunds it",
    ),
}


def _attr(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def record(framework: str, out: Path) -> Path:
    module_name, script_path, run_id, note = FRAMEWORKS[framework]
    example = importlib.import_module(module_name)
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(_attr(script_path)) as srv:
        os.environ["OPENAI_BASE_URL"] = srv.openai_base_url
        os.environ["OPENAI_API_KEY"] = "sk-corpus"
        os.environ["ANTHROPIC_BASE_URL"] = srv.base_url
        os.environ["ANTHROPIC_API_KEY"] = "sk-corpus"
        os.environ["REFUND_COUNTER"] = str(Path(tmp) / "refunds.json")
        db = str(Path(tmp) / "runs.db")
        result = tg.record_run(example.agent, example.PROMPT, store=db, run_id=run_id)
        if result.status != "ok":
            raise SystemExit(f"{framework}: the run ended {result.status}: {result.error}")
        target = out / framework
        target.mkdir(parents=True, exist_ok=True)
        return save_run(db, run_id, to=target, verdict="good", note=note, overwrite=True)


def record_httpx(out: Path) -> Path:
    """The plain-httpx agent against a shop API on the port its example names."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import urlsplit

    example = importlib.import_module("examples.httpx_refund")
    refunds: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _reply(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            order_id = self.path.rsplit("/", 1)[-1]
            self._reply(200, {"order_id": order_id, "status": "delivered", "total": 19.99})

        def do_POST(self) -> None:
            size = int(self.headers.get("content-length") or 0)
            refunds.append(json.loads(self.rfile.read(size) or b"{}"))
            self._reply(201, {"refund_id": f"rf_{len(refunds)}", **refunds[-1]})

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    url = urlsplit(example.SHOP_URL)
    server = ThreadingHTTPServer((url.hostname or "127.0.0.1", url.port or 80), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    run_id = "httpx-good-refund-b2002"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            db = str(Path(tmp) / "runs.db")
            result = tg.record_run(example.agent, example.PROMPT, store=db, run_id=run_id)
            if result.status != "ok" or len(refunds) != 1:
                raise SystemExit(f"httpx: the run ended {result.status}: {result.error}")
            target = out / "httpx"
            target.mkdir(parents=True, exist_ok=True)
            note = "a plain httpx agent reads order B-2002 (external.read) and refunds it (POST)"
            return save_run(db, run_id, to=target, verdict="good", note=note, overwrite=True)
    finally:
        server.shutdown()
        server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("frameworks", nargs="+", choices=sorted([*FRAMEWORKS, "httpx"]))
    parser.add_argument("--out", type=Path, default=ROOT / "corpus")
    args = parser.parse_args()
    for framework in args.frameworks:
        print(record_httpx(args.out) if framework == "httpx" else record(framework, args.out))


if __name__ == "__main__":
    main()
