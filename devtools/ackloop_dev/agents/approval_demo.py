"""``approval-demo``: an agent whose payments wait for a person, to try waits at once.

Its one side-effecting tool, ``send_payment``, needs approval; ``account_balance`` does not;
``await_receipt`` waits for the named event ``receipt:<who>`` (``ackloop runs send-event``).
Offline its model is a script: it asks to pay what the question says ("pay 40 to Ada"; each
payment its own parallel call, "pay 40 to Ada and pay 30 to Bo"; 25 to Ada otherwise), for the
balance when the question mentions it (a call that runs beside the waiting ones) and for the
first payee's receipt when it mentions one, then reports what came back: each payment, or why
it was not made, and the receipt.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ackloop.agents.agent import Agent
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.transcript import read_exchange
from ackloop.model.turns import calls_turn, text_turn
from ackloop.tools.base import ToolContext
from ackloop.tools.definition import tool

NAME = "approval-demo"
INSTRUCTIONS = ("You pay people for the user. Payments wait for a person's approval; report "
                "what happened, including a rejection and its reason.")
_PAY = re.compile(r"\bpay\s+(\d{1,9})\s+to\s+([A-Za-z][\w.-]{0,40})", re.IGNORECASE)


@tool(requires_approval=True, retry_safe=False)
def send_payment(to: str, amount: int) -> dict[str, Any]:
    """Send a payment. Waits for a person's approval before it is made.

    Args:
        to: Who is paid.
        amount: How much, in whole euros.
    """
    return {"paid": to, "amount": amount, "status": "sent"}


@tool(waits_for=lambda args: f"receipt:{args['to']}")
def await_receipt(to: str, context: ToolContext) -> dict[str, Any]:
    """Wait until the payee confirms they received the payment (the event ``receipt:<to>``).

    Args:
        to: Who was paid.
    """
    return {"receipt_from": to, **(context.event or {})}


@tool
def account_balance() -> dict[str, int]:
    """The account's balance, in whole euros."""
    return {"balance": 1000}


def demo_script(request: ModelRequest) -> ModelTurn:
    """The offline model: ask for the payments (and the balance, the receipt), then report the
    results."""
    exchange = read_exchange(request.contents)
    if not exchange.results:
        payments = [{"to": m.group(2), "amount": int(m.group(1))}
                    for m in _PAY.finditer(exchange.question)] or [{"to": "Ada", "amount": 25}]
        calls: list[tuple[str, dict[str, Any]]] = [("send_payment", p) for p in payments]
        if "balance" in exchange.question.lower():
            calls.append(("account_balance", {}))
        if "receipt" in exchange.question.lower():
            calls.append(("await_receipt", {"to": payments[0]["to"]}))
        return calls_turn(calls, request=request)
    report = "; ".join(f"{r.name}: {json.dumps(r.response, sort_keys=True)}"
                       for r in exchange.results)
    return text_turn(report, request=request)


def approval_demo_agent() -> Agent:
    return Agent(NAME, INSTRUCTIONS, [send_payment, account_balance, await_receipt],
                 script=demo_script)
