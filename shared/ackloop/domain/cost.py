"""What a step, a run and a conversation cost, at Google's published list prices.

The price table is dated (:data:`PRICE_TABLE_DATE`) and comes from these pages, as they read
on that date (list prices in USD, paid tier, no free tier, no committed-use or batch discount):

- Gemini: ai.google.dev/gemini-api/docs/pricing, per 1M tokens, text input and output
  (output includes thinking tokens); the Pro models at their prompt-up-to-200k-tokens tier.
  Input tokens Gemini served from its cache (``cachedContentTokenCount``: implicit caching of
  a repeated request prefix) at the page's context-caching price, a tenth of the input price
  for the 2.5 and 3 models and $0.025 for 2.0 Flash (implicit caching bills no storage).
  Vertex AI lists the same prices for these models.
- Firestore: cloud.google.com/firestore/pricing, Standard edition, regional ``us-central1``:
  $0.03 per 100,000 document reads, $0.09 per 100,000 writes, $0.01 per 100,000 deletes
  (multi-region ``nam5`` is twice that).
- Pub/Sub: cloud.google.com/pubsub/pricing, $40 per TiB of throughput, every publish and
  every delivery billed at least 1,000 bytes.
- Cloud Run: cloud.google.com/run/pricing, request-based billing, tier 1 region:
  $0.000024 per vCPU-second, $0.0000025 per GiB-second, $0.40 per million requests.

The engine counts what each delivery used (tokens, documents, message bytes, request time)
and prices it here; the counts are kept next to the dollars, so a bill at other prices can be
worked out again from them. Check the pages before quoting a bill.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

PRICE_TABLE_DATE = "2026-11-30"
TIB = 2**40
PUBSUB_MIN_BYTES = 1000
"""The least a publish or a delivery of one message is billed."""


@dataclass(frozen=True)
class GeminiPrice:
    """USD per 1M tokens."""

    input_per_million: float
    output_per_million: float
    cached_input_per_million: float
    """Input tokens served from Gemini's cache."""


GEMINI_PRICES: dict[str, GeminiPrice] = {
    "gemini-3-flash-preview": GeminiPrice(0.50, 3.00, 0.05),
    "gemini-3-pro-preview": GeminiPrice(2.00, 12.00, 0.20),
    "gemini-2.5-pro": GeminiPrice(1.25, 10.00, 0.125),
    "gemini-2.5-flash": GeminiPrice(0.30, 2.50, 0.03),
    "gemini-2.5-flash-lite": GeminiPrice(0.10, 0.40, 0.01),
    "gemini-2.0-flash": GeminiPrice(0.10, 0.40, 0.025),
}


@dataclass(frozen=True)
class PriceTable:
    """USD list prices of one unit each (see the module docstring for their sources)."""

    date: str = PRICE_TABLE_DATE
    gemini: dict[str, GeminiPrice] = field(default_factory=lambda: dict(GEMINI_PRICES))
    firestore_read: float = 0.03 / 100_000
    firestore_write: float = 0.09 / 100_000
    firestore_delete: float = 0.01 / 100_000
    pubsub_byte: float = 40.0 / TIB
    run_request: float = 0.40 / 1_000_000
    run_vcpu_second: float = 0.000024
    run_gib_second: float = 0.0000025

    def gemini_price(self, model: str) -> GeminiPrice | None:
        """The model's price: by exact name, else by the longest listed name it starts with
        (``gemini-2.5-flash-001`` is priced as ``gemini-2.5-flash``); None when unlisted."""
        if model in self.gemini:
            return self.gemini[model]
        known = [name for name in self.gemini if model.startswith(name)]
        return self.gemini[max(known, key=len)] if known else None


PRICES = PriceTable()


def pubsub_billed_bytes(size: int) -> int:
    """What one publish or one delivery of a message of ``size`` bytes is billed."""
    return max(PUBSUB_MIN_BYTES, size)


class Counts(BaseModel):
    """The counted quantities of a delivery, a step or a run: what a :class:`Spend` measures
    and its :class:`Cost` keeps next to the dollars (declared once, so a count added is in
    both)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = Field(default=0, exclude_if=lambda v: v == 0)
    """Of ``prompt_tokens``, those served from Gemini's cache (priced at the cached rate); like
    ``children_usd``, left out of a stored cost when 0 (every step document carries one)."""
    firestore_reads: int = 0
    firestore_writes: int = 0
    pubsub_bytes: int = 0
    requests: int = 0
    request_seconds: float = 0.0


class _Amounts(BaseModel):
    """A :class:`Cost`'s dollars, first in its document (a base of its own so that the
    counts inherited from :class:`Counts` keep their place after them)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    usd: float = 0.0
    gemini_usd: float = 0.0
    firestore_usd: float = 0.0
    pubsub_usd: float = 0.0
    cloud_run_usd: float = 0.0


class Cost(Counts, _Amounts):
    """What something spent: the counted quantities and their price in USD.

    ``usd`` is the sum of the four services; an ``unpriced_models`` entry names a model the
    price table does not list, whose tokens are counted but cost $0 here.
    """

    children_usd: float = Field(default=0.0, exclude_if=lambda v: v == 0)
    """The part of ``usd`` that child runs spent (a run's sub-agents' calls, each child's
    whole tree), counted once each call has its child's end."""
    price_table: str = PRICE_TABLE_DATE
    unpriced_models: list[str] = []

    def plus(self, other: Cost) -> Cost:
        """The two together (a roll-up): every count and amount summed."""
        summed = {name: getattr(self, name) + getattr(other, name) for name in _SUMMED}
        return Cost(**summed, price_table=self.price_table,
                    unpriced_models=sorted({*self.unpriced_models, *other.unpriced_models}))

    def minus(self, other: Cost) -> Cost:
        """What is left of this roll-up once ``other`` (a part of it) is taken out; no count or
        amount goes below 0."""
        left = {name: max(0, getattr(self, name) - getattr(other, name)) for name in _SUMMED}
        return Cost(**left, price_table=self.price_table, unpriced_models=self.unpriced_models)

    def as_child(self) -> Cost:
        """A child run's cost as its parent counts it: all of it, and all of it its
        children's."""
        return self.model_copy(update={"children_usd": self.usd})

    @staticmethod
    def total(costs: list[Cost | None]) -> Cost:
        """The roll-up of ``costs`` (None counts as nothing spent)."""
        rolled = Cost()
        for cost in costs:
            if cost is not None:
                rolled = rolled.plus(cost)
        return rolled


_SUMMED = [name for name in Cost.model_fields if name not in ("price_table", "unpriced_models")]


class Spend(Counts):
    """What one delivery used, counted by the engine: the :class:`Counts` its :class:`Cost`
    carries (:func:`price` copies them), with what prices them (the model, the service's
    size). One delivery is one request."""

    model: str | None = None
    requests: int = 1
    vcpu: float = 1.0
    memory_gib: float = 0.5


def price(spend: Spend, prices: PriceTable = PRICES) -> Cost:
    """One delivery's :class:`Cost`: its counts at ``prices``."""
    unpriced: list[str] = []
    gemini = 0.0
    if spend.model is not None and (spend.prompt_tokens or spend.output_tokens):
        per = prices.gemini_price(spend.model)
        if per is None:
            unpriced = [spend.model]
        else:
            cached = min(spend.cached_tokens, spend.prompt_tokens)
            gemini = ((spend.prompt_tokens - cached) * per.input_per_million
                      + cached * per.cached_input_per_million
                      + spend.output_tokens * per.output_per_million) / 1_000_000
    firestore = (spend.firestore_reads * prices.firestore_read
                 + spend.firestore_writes * prices.firestore_write)
    pubsub = spend.pubsub_bytes * prices.pubsub_byte
    cloud_run = prices.run_request + spend.request_seconds * (
        spend.vcpu * prices.run_vcpu_second + spend.memory_gib * prices.run_gib_second)
    return Cost(
        usd=gemini + firestore + pubsub + cloud_run,
        gemini_usd=gemini, firestore_usd=firestore, pubsub_usd=pubsub, cloud_run_usd=cloud_run,
        **{name: getattr(spend, name) for name in Counts.model_fields},
        price_table=prices.date, unpriced_models=unpriced,
    )
