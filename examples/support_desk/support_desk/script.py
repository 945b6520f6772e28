"""How the support agent behaves offline: a script of the conversation, not a model.

The local stack without Gemini credentials, and the tests, run the agent with this script
through the real engine. It decides from the conversation alone (no counters), because every
model step may run in another process.
"""

from __future__ import annotations

import re

from ackloop import Conversation, Reply, call, text

_ORDER = re.compile(r"\bA-\d{4}\b")
_TROUBLE = re.compile(r"late|delay|broken|damaged|refund|where is|missing", re.IGNORECASE)


def support_turn(conversation: Conversation) -> Reply:
    found = _ORDER.search(conversation.question)
    if found is None:
        return text("Please tell me your order number; it looks like A-1234.")
    order_id = found.group()
    if not conversation.called("lookup_order"):
        return call("lookup_order", order_id=order_id)
    order = conversation.result("lookup_order")
    if order is None:
        return text(f"I could not find order {order_id}. Could you check the number?")
    answer = (f"Order {order_id} is {order['status']} (carrier {order['carrier']}, "
              f"expected {order['eta']}).")
    needs_ticket = order["status"] == "delayed" or _TROUBLE.search(conversation.question)
    if needs_ticket and order["status"] != "shipped" and not conversation.called("open_ticket"):
        return call("open_ticket", order_id=order_id, summary=conversation.question[:500])
    ticket = conversation.result("open_ticket")
    if ticket is not None:
        answer += f" I opened ticket {ticket['ticket']}; a colleague will follow up."
    return text(answer)


def triage_answer(conversation: Conversation) -> str:
    """The triage agent's scripted text; the engine turns it into its structured output."""
    return "refund" if re.search(r"refund|money back", conversation.question, re.I) else "order"
