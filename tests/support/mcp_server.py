"""A small real MCP server for the MCP tool tests, served over stdio or streamable HTTP.

    python -m tests.support.mcp_server stdio
    python -m tests.support.mcp_server http PORT

Every call of ``place_order`` (the side-effecting tool) is appended, with the idempotency key
the client sent in the request's ``_meta``, to the JSON-lines file named by ``MCP_TEST_LEDGER``:
the tests read it to see what reached the server, from another process.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import BlobResourceContents, EmbeddedResource, ToolAnnotations
from pydantic import BaseModel, Field

IDEMPOTENCY_META_KEY = "ackloop/idempotency_key"
LEDGER_ENV = "MCP_TEST_LEDGER"

server = MCPServer("orders", log_level="WARNING")


class Address(BaseModel):
    """Where to ship."""

    city: str = Field(description="The city.")
    postcode: str | None = Field(default=None, description="Postal code, if known.")


def _record(tool: str, arguments: dict[str, Any], ctx: Context) -> None:
    meta = ctx.request_context.meta or {}
    entry = {"tool": tool, "arguments": arguments, "key": meta.get(IDEMPOTENCY_META_KEY),
             "pid": os.getpid()}
    with Path(os.environ[LEDGER_ENV]).open("a", encoding="utf-8") as ledger:
        ledger.write(json.dumps(entry) + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup_order(order_id: str) -> dict[str, str]:
    """Find an order's status by its number."""
    if order_id != "A-1234":
        raise ToolError(f"there is no order {order_id}; check the number")
    return {"order_id": order_id, "status": "shipped"}


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def place_order(item: str, quantity: int, ctx: Context, ship_to: Address | None = None) -> str:
    """Place an order for an item. Charges the customer."""
    _record("place_order", {"item": item, "quantity": quantity}, ctx)
    return f"order placed: {quantity} x {item}"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
def set_address(order_id: str, city: str) -> str:
    """Set an order's delivery city (setting it twice changes nothing)."""
    return f"{order_id} ships to {city}"


@server.tool()
async def slow(seconds: float) -> str:
    """Wait, then answer."""
    await asyncio.sleep(seconds)
    return "done"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def report(lines: int) -> str:
    """A long report."""
    return "\n".join(f"line {n}: all is well" for n in range(lines))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def connection_info() -> str:
    """Connection details of the order service."""
    return "connect with api_key=sk-live-abcdefghijklmnopqrstuvwx as user ops"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def server_pid() -> int:
    """The server's process id."""
    return os.getpid()


def order_png() -> bytes:
    """A 40 x 24 PNG of an order's label, made with pillow."""
    import io

    from PIL import Image as Picture

    picture = Picture.new("RGB", (40, 24), (200, 30, 30))
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def order_photo(order_id: str) -> list[str | Image]:
    """A photo of an order's label: text, then the image (an MCP ImageContent)."""
    return [f"the label of {order_id}:", Image(data=order_png(), format="png")]


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def order_invoice(order_id: str) -> EmbeddedResource:
    """An order's invoice, as an embedded blob resource."""
    return EmbeddedResource(type="resource", resource=BlobResourceContents(
        uri=f"orders://invoices/{order_id}.pdf", mime_type="application/pdf",
        blob=base64.b64encode(b"%PDF-1.4 invoice " + order_id.encode()).decode()))


def main(argv: list[str]) -> None:
    if argv[:1] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
