"""Spend limits: a dollar budget per key and period (``ACKLOOP_SPEND_LIMITS``,
:mod:`ackloop.config.spend`), checked before each paid model call.

**Before the call** (:func:`checked`) the step reads what its keys spent this period
(``spend/{key}@{period}``, one document per budget and period, all in one read) and adds the
call's input at the model's price (its tokens estimated as for a quota). A call that would go
over a budget either **waits** for the next period (:class:`SpendWait`: acknowledged, its wake
armed at the period's end, at no cost) or **fails its run** (``spend_limit``, naming the
budget), as the budget says; a period's first call always goes, however large. **After the
call** (:func:`spent`) what it cost (its tokens at the model's prices) is added to each
budget's document, written at the version read. A model the price table does not list costs
nothing and is never held back.

What it costs: a model call under budgets reads their documents once and writes each once.
"""

from __future__ import annotations

from dataclasses import dataclass

from ackloop.config.spend import SpendLimit
from ackloop.domain.cost import PRICES
from ackloop.domain.errors import PermanentError
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import limiter_doc_id
from ackloop.domain.records import RunRecord
from ackloop.domain.wire import ModelStepMessage, Usage
from ackloop.engine.deps import Deps
from ackloop.engine.lease import LimiterWait, arm_limiter_wake
from ackloop.store import Claim


class SpendWait(LimiterWait):
    """The call would go over a budget: the step waits for the budget's next period."""

    def __init__(self, budget: str, until: float) -> None:
        super().__init__(f"waiting for the next period of the spend limit {budget}")
        self.budget, self.until = budget, until


@dataclass(frozen=True)
class Budget:
    """One budget a call counts against, this period: its limit, its document, the period's
    end, and how it reads ("owner ada: $5 per day")."""

    limit: SpendLimit
    spend_id: str
    end: float
    named: str


def budgets_of(deps: Deps, run: RunRecord, agent: str, now: float) -> list[Budget]:
    """The budgets a model call of ``run`` (its turn's ``agent``) counts against now."""
    found = []
    for limit in deps.limits.spend_limits:
        value = {"owner": run.owner, "agent": agent, "tenant": run.limits.tenant,
                 "deployment": "*"}[limit.key]
        if value is None:
            continue
        start, end = limit.period_of(now)
        spend_id = limiter_doc_id(f"{limit.key}:{value}@{limit.period}:{start:.0f}")
        found.append(Budget(limit, spend_id, end,
                            f"{limit.key} {value}: ${limit.usd:g} per {limit.period}"))
    return found


def input_usd(model: str, tokens: int) -> float:
    """What ``tokens`` input tokens cost on ``model`` (0 for a model the table does not list)."""
    price = PRICES.gemini_price(model)
    return tokens * price.input_per_million / 1e6 if price is not None else 0.0


def call_usd(model: str, usage: Usage) -> float:
    """What a call that used ``usage`` cost on ``model``."""
    price = PRICES.gemini_price(model)
    if price is None:
        return 0.0
    cached = usage.cached_tokens
    return ((usage.prompt_tokens - cached) * price.input_per_million
            + cached * price.cached_input_per_million
            + usage.output_tokens * price.output_per_million) / 1e6


async def checked(deps: Deps, run: RunRecord, agent: str, model: str, tokens: int
                  ) -> list[Budget]:
    """The budgets the call counts against, when it fits in every one. Raises
    :class:`SpendWait` (a budget that waits) or :class:`PermanentError` (``spend_limit``: one
    that fails the run) when it does not."""
    budgets = budgets_of(deps, run, agent, deps.clock.now())
    if not budgets:
        return []
    cost = input_usd(model, tokens)
    docs = await deps.store.quotas.read_spend([b.spend_id for b in budgets])
    for budget, doc in zip(budgets, docs, strict=True):
        spent_usd = float((doc or {}).get("usd", 0.0))
        # Nothing spent this period: the call goes, however large (else it never would).
        if cost > 0 and spent_usd > 0 and spent_usd + cost > budget.limit.usd:
            if budget.limit.over == "fail":
                raise PermanentError(
                    f"the spend limit {budget.named} is spent (${spent_usd:.4f} this period); "
                    f"the call would cost about ${cost:.4f} more", reason="spend_limit")
            raise SpendWait(budget.named, budget.end)
    return budgets


async def spent(deps: Deps, budgets: list[Budget], model: str, usage: Usage) -> None:
    """Add what the call cost to each of its budgets."""
    usd = call_usd(model, usage)
    if usd <= 0:
        return
    for budget in budgets:
        def added(data: JsonDict | None, budget: Budget = budget
                  ) -> tuple[JsonDict | None, None]:
            doc = data or {}
            return {"usd": float(doc.get("usd", 0.0)) + usd,
                    "calls": int(doc.get("calls", 0)) + 1, "until": budget.end}, None

        await deps.store.quotas.change_spend(budget.spend_id, added)


async def wait_for_period(deps: Deps, claim: Claim, message: ModelStepMessage,
                          wait: SpendWait, since: float) -> None:
    """The step waits for the budget's next period: its claim given back (as not tried), its
    own message armed to be published when the period ends."""
    await deps.store.steps.give_back(claim)
    await arm_limiter_wake(deps, wait, limiter="spend", topic="model_steps",
                           message=message.model_dump(mode="json"), run_id=message.run_id,
                           step=claim.key, at=wait.until, since=since,
                           stamp=f"{wait.until:.0f}")
