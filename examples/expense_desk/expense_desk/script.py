"""How the desk's agents behave offline: scripts of the conversation, not a model.

Without Gemini credentials (the local stack offline, the tests), each agent is played by its
script through the real engine. A script decides from the conversation alone (no counters),
because every model step may run in another process. With Gemini, the model reads the same
instructions and tools (and a receipt's file) and the scripts are not used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ackloop import Conversation, Reply, call, calls, text

_AMOUNT = re.compile(r"(\d+(?:\.\d{1,2})?)\s*(?:eur\b|euros?\b|€)", re.IGNORECASE)
_WORDS = {
    "meals": ("meal", "dinner", "lunch", "breakfast", "restaurant"),
    "travel": ("travel", "taxi", "train", "flight", "bus"),
    "lodging": ("lodging", "hotel", "night"),
    "equipment": ("equipment", "laptop", "monitor", "keyboard", "headset"),
}


@dataclass(frozen=True)
class Claim:
    """What a question says of an expense: its category and, when given, its amount."""

    category: str
    amount_eur: float | None


def read_claim(question: str) -> Claim | None:
    """The claim a question describes (None when it names no category)."""
    lowered = question.lower()
    category = next((name for name, words in _WORDS.items()
                     if any(re.search(rf"\b{word}", lowered) for word in words)), None)
    if category is None:
        return None
    amount = _AMOUNT.search(question)
    return Claim(category, float(amount.group(1)) if amount else None)


ASK_CATEGORY = "What was the expense for: meals, travel, lodging or equipment?"


def limit_answer(claim: Claim, limit: float) -> str:
    """The answer about a claim and its category's limit."""
    said = f"The policy refunds up to {limit:.2f} EUR for one {claim.category} expense"
    if claim.amount_eur is None:
        return said + "."
    within = "within" if claim.amount_eur <= limit else "over"
    return said + f", so {claim.amount_eur:.2f} EUR is {within} it."


# --8<-- [start:limit_turn]
def limit_turn(conversation: Conversation) -> Reply:
    """The first agent: look the category's limit up, then answer with it."""
    claim = read_claim(conversation.question)
    if claim is None:
        return text(ASK_CATEGORY)
    limit = conversation.result("policy_limit")
    if limit is None:
        return call("policy_limit", category=claim.category)
    return text(limit_answer(claim, limit["limit_eur"]))
# --8<-- [end:limit_turn]


def auditor_question(claim: Claim) -> str:
    """What the desk asks the auditor about a claim."""
    return f"Is a {claim.category} claim of {claim.amount_eur:.2f} EUR a duplicate?"


# --8<-- [start:expenses_turn]
def expenses_turn(conversation: Conversation) -> Reply:
    """The desk: the limit and the auditor at once, then an answer or the manager."""
    claim = read_claim(conversation.question)
    if claim is None:
        return text(ASK_CATEGORY)
    if claim.amount_eur is None:  # a question about the policy alone
        return limit_turn(conversation)
    if not conversation.called("policy_limit"):  # two calls in one turn run in parallel
        return calls(call("policy_limit", category=claim.category),
                     call("ask_auditor", question=auditor_question(claim)))
    limit = conversation.result("policy_limit")["limit_eur"]
    if claim.amount_eur > limit:  # the manager takes the conversation over
        return call("transfer_to_manager", note=limit_answer(claim, limit))
    audit = conversation.result("ask_auditor") or "no finding (the audit did not answer)"
    return text(f"Yes. {limit_answer(claim, limit)} The auditor says: {audit}")
# --8<-- [end:expenses_turn]


def auditor_turn(conversation: Conversation) -> Reply:
    """The auditor (a child run, asked ``auditor_question``): the category's past claims,
    then whether one has the same amount."""
    claim = read_claim(conversation.question)
    if claim is None or claim.amount_eur is None:
        return text("I audit one claim at a time: give its category and amount.")
    if not conversation.called("past_claims"):
        return call("past_claims", category=claim.category)
    same = [c for c in conversation.result("past_claims") or []
            if c["amount_eur"] == claim.amount_eur]
    if not same:
        return text(f"No earlier {claim.category} claim of {claim.amount_eur:.2f} EUR.")
    return text(f"Possible duplicate of {same[0]['claim']} ({claim.amount_eur:.2f} EUR on "
                f"{same[0]['date']}): check it is not the same expense.")


def manager_turn(conversation: Conversation) -> Reply:
    """The manager (after the hand-off): ask finance for an exception, then say so."""
    claim = read_claim(conversation.question)
    if claim is None or claim.amount_eur is None:
        return text("Tell me the amount and what it was for, and I will look at it.")
    exception = conversation.result("open_exception")
    if exception is None:
        return call("open_exception", amount_eur=claim.amount_eur, category=claim.category,
                    reason=conversation.question[:500])
    return text(f"{claim.amount_eur:.2f} EUR is over the {claim.category} limit, so I asked "
                f"finance for an exception: {exception['exception']}. You will hear back "
                "within two working days.")
