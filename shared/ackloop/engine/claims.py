"""When a step claims its document before its call, and when it runs unclaimed.

A claim is a write (a round trip, $0.09 per 100,000 at list prices) made on every step so that
a second delivery of the same step *while the first runs* waits instead of calling again. A
step run unclaimed reads, calls, and creates its document with its result and its outbox in
one commit whose precondition is that the document does not exist yet: of two deliveries that
ran it at once, one records it and the other drops its result. What it saves is
one write and one round trip on every step; what it risks is a second call when a duplicate
delivery overlaps the first, which costs that call once more.

The engine itself sends each step's message once: a model step after a turn of parallel calls
(tools or child runs) is published by the one tool step whose commit came last
(:func:`ackloop.engine.tool_step.join`), not by every sibling that saw the turn complete (which
made 0.55 extra paid calls per run of two parallel calls, and 0.15 per research-team tree, on
the local stack: ``python -m ackloop_dev.bench.fan_in``). So the only duplicates left are
Pub/Sub's, and the arithmetic below holds for every step.

Pub/Sub push redelivers a message while its first delivery runs only as a rare duplicate: the
ack deadline of ackloop's push subscriptions is the service's request timeout (infra), so a
delivery still running is never redelivered for being slow, and a crashed one is redelivered
after it died (its call is made again with or without a claim). :data:`DUPLICATE_RATE` is the
share of deliveries assumed to overlap a duplicate. So a claim pays when

    DUPLICATE_RATE * (what the call costs) > the price of one document write.

- A model call costs at least its prompt: (prompt tokens) * (the model's input price). At
  1 in 1,000 and $0.09 per 100,000 writes, a claim pays above $0.0009 of prompt: about 1,800
  tokens of Gemini 3 Flash ($0.50 / 1M), 9,000 of Gemini 2.5 Flash-Lite, 450 of Gemini 3 Pro.
  A short conversation runs unclaimed; a long one, where a duplicate would cost a paid call,
  claims. A model the price table does not list (the scripted offline model) costs nothing.
- A streamed model call follows the same rule before its call, and claims **at its first
  text** when it started unclaimed (:class:`ackloop.engine.lease.ClaimAtFirstText`): its
  text is written to the run while it runs and followed live under its step's attempt, so
  text needs a claim (an in-request retry after text was shown takes the step's next
  attempt, which only a claimed step has), but a turn that shows none (function calls only,
  or thoughts only) does not. The claim is started as a task when the first text arrives,
  committed with that first delta (one round trip), and awaited before the other deltas are
  written and before the commit; it is only a create (the
  claim an eager step makes, with its lease and heartbeat), so a delivery that finds the step
  claimed or recorded by another delivery drops its call, writes no delta and gives up as a
  holder that lost its lease does. A turn with text costs what an eager claim costs (one
  write, one round trip, made while the stream is read); a turn without text costs none. A
  run of n turns of function calls and an answer claims once instead of n + 1 times: n
  writes and n round trips fewer. The step profile's 11-step run (5 tool turns, 6 model
  turns, 31 round trips when every streamed call claimed) makes 24 (the answer's claim
  carries its first words, its commit the rest): 2.82 -> 2.18 round trips and 2.55 -> 2.09
  documents written per step (2.09 and 1.82 unstreamed). The risk is the unclaimed step's, priced by
  the same inequality: a duplicate that overlaps the first delivery before either shows text
  or commits calls the model a second time (its prompt at least), and the rule only lets a
  call run unclaimed where 1 in 1,000 of that prompt costs less than the write.
- A model step that will **compact** first always claims (:func:`ackloop.engine.model_step`
  estimates it at the claim): its summary is the dearest call a step makes, so a duplicate
  waits for the holder instead of paying for a second summary.
- A tool call's price is not known, but its safety is: a tool that is not retry-safe always
  claims (its lease is what keeps it from running twice after a crash), and so does a call
  that waits for an approval or an event (its wait is recorded on the claimed step). A
  retry-safe tool runs unclaimed: run twice, it does no harm by its own declaration.

A step that fails unclaimed records its failure by creating its document, released
(:meth:`ackloop.store.AgentStore.release_step`): the redelivery then claims it, so attempts
are counted as before. ``ACKLOOP_STEP_CLAIMS=always`` claims every step.
"""

from __future__ import annotations

from ackloop.config.settings import Settings
from ackloop.domain.cost import PRICES

DUPLICATE_RATE = 1e-3
"""Share of step deliveries assumed to overlap a duplicate delivery of the same step."""
BYTES_PER_TOKEN = 4.0
"""A prompt's size in tokens, estimated from its JSON bytes."""


def model_call_claims(settings: Settings, model: str, prompt_bytes: int) -> bool:
    """Whether a model step claims before its call, streamed or not (see the module docstring;
    a streamed call that runs unclaimed claims at its first text)."""
    if settings.step_claims == "always":
        return True
    price = PRICES.gemini_price(model)
    if price is None:
        return False
    prompt_usd = prompt_bytes / BYTES_PER_TOKEN * price.input_per_million / 1e6
    return DUPLICATE_RATE * prompt_usd > PRICES.firestore_write


def tool_call_claims(settings: Settings, *, retry_safe: bool, waits: bool) -> bool:
    """Whether a tool step claims before its call (see the module docstring)."""
    return settings.step_claims == "always" or not retry_safe or waits
