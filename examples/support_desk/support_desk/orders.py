"""The support desk's tools: look an order up, open a ticket about it.

The order book is a small table here, so the example runs anywhere; in a real desk these
functions call the order service with the same signatures.
"""

from __future__ import annotations

import hashlib
from typing import Annotated

from pydantic import Field

from ackloop import ToolContext, ToolError, tool

ORDER_ID = r"^A-\d{4}$"

ORDERS: dict[str, dict[str, str]] = {
    "A-1234": {"status": "shipped", "carrier": "Correios", "eta": "2026-12-04"},
    "A-2001": {"status": "delayed", "carrier": "Jadlog", "eta": "2026-12-11"},
    "A-3000": {"status": "processing", "carrier": "-", "eta": "2026-12-08"},
}


@tool
def lookup_order(order_id: Annotated[str, Field(pattern=ORDER_ID)]) -> dict[str, str]:
    """Find an order's status, carrier and expected delivery date.

    Args:
        order_id: The order number, e.g. A-1234.
    """
    order = ORDERS.get(order_id)
    if order is None:
        raise ToolError(f"there is no order {order_id}; ask the customer to check the number")
    return {"order_id": order_id, **order}


@tool(retry_safe=False)
async def open_ticket(
    order_id: Annotated[str, Field(pattern=ORDER_ID)],
    summary: Annotated[str, Field(min_length=3, max_length=500)],
    context: ToolContext,
) -> dict[str, str]:
    """Open a support ticket about an order, for a human to follow up.

    Args:
        order_id: The order the ticket is about.
        summary: What the customer needs, in one sentence.
    """
    # A ticket system dedupes on the call's idempotency key: a redelivered step that runs this
    # again gets the same ticket, never a second one.
    number = hashlib.sha256(context.idempotency_key.encode()).hexdigest()[:6].upper()
    return {"ticket": f"T-{number}", "order_id": order_id, "summary": summary}
