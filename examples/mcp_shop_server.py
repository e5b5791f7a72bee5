"""A small MCP shop server (MCP Python SDK 2.x): a read tool and a refund tool.

``python mcp_shop_server.py stdio`` serves over stdin/stdout; ``python mcp_shop_server.py
http PORT`` serves streamable HTTP on 127.0.0.1:PORT at ``/mcp``. The refund's side effect
is a counter in the file named by ``SHOP_COUNTER`` (default ``refunds.json``); each start
of the server adds one to the file named by ``SHOP_STARTS``, when set, so that a test can
tell whether the server was started at all. ``SHOP_TOTAL`` changes the order total that
``lookup_order`` answers (19.99 by default).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations


def _bump(path: Path) -> int:
    done = int(json.loads(path.read_text())) if path.exists() else 0
    path.write_text(json.dumps(done + 1))
    return done + 1


def build(counter: Path | None = None) -> MCPServer:
    """The shop server; ``counter`` defaults to ``$SHOP_COUNTER`` or ``refunds.json``."""
    refunds = counter or Path(os.environ.get("SHOP_COUNTER", "refunds.json"))
    server: MCPServer = MCPServer("shop")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order by id."""
        total = float(os.environ.get("SHOP_TOTAL", "19.99"))
        return {"order_id": order_id, "status": "delivered", "total": total}

    @server.tool(annotations=ToolAnnotations(destructiveHint=True, idempotentHint=False))
    def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
        """Refund an order."""
        number = _bump(refunds)
        return {"refund_id": f"rf_{number}", "order_id": order_id, "amount": amount}

    return server


def main(argv: list[str]) -> None:
    starts = os.environ.get("SHOP_STARTS")
    if starts:
        _bump(Path(starts))
    server = build()
    if argv[:1] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
