"""The expense desk's tools: the policy's limits, the claims already filed, an exception.

The policy and the claims are small tables here, so the app runs anywhere; in a real desk
these functions call the finance system with the same signatures.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

from pydantic import Field

from ackloop import ToolContext, tool

# --8<-- [start:limits]
Category = Literal["meals", "travel", "lodging", "equipment"]

LIMITS_EUR: dict[str, float] = {"meals": 60.0, "travel": 400.0, "lodging": 180.0,
                                "equipment": 250.0}
# --8<-- [end:limits]

CLAIMS: list[dict[str, str | float]] = [
    {"claim": "C-1001", "category": "meals", "amount_eur": 48.0, "date": "2026-11-20"},
    {"claim": "C-1002", "category": "travel", "amount_eur": 212.4, "date": "2026-11-24"},
]


# --8<-- [start:policy_limit]
@tool
def policy_limit(category: Category) -> dict[str, str | float]:
    """The most the expense policy refunds for one expense of a category, in euros.

    Args:
        category: What the expense was for.
    """
    return {"category": category, "limit_eur": LIMITS_EUR[category]}
# --8<-- [end:policy_limit]


@tool
def past_claims(category: Category) -> list[dict[str, str | float]]:
    """The claims of a category filed in the last 90 days, newest first.

    Args:
        category: The category of the claims to list.
    """
    return [claim for claim in reversed(CLAIMS) if claim["category"] == category]


# --8<-- [start:open_exception]
@tool(retry_safe=False)
async def open_exception(
    amount_eur: Annotated[float, Field(gt=0)],
    category: Category,
    reason: Annotated[str, Field(min_length=3, max_length=500)],
    context: ToolContext,
) -> dict[str, str]:
    """Ask finance for an exception to the policy, for an expense over its limit.

    Args:
        amount_eur: The expense, in euros.
        category: What the expense was for.
        reason: Why the employee spent more than the limit, in one sentence.
    """
    # The finance system dedupes on the call's idempotency key: a redelivered step that runs
    # this again gets the same request, never a second one.
    number = hashlib.sha256(context.idempotency_key.encode()).hexdigest()[:6].upper()
    return {"exception": f"X-{number}", "category": category, "amount_eur": f"{amount_eur:.2f}"}
# --8<-- [end:open_exception]
