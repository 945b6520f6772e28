"""What a model call is sent of a long conversation: the context policy, and compaction.

Every model call of a conversation sends its history, so without a policy a long conversation
costs more with every turn (the sum over a conversation grows with the square of its length)
and, once the history passes the model's input limit, every later call fails with Gemini's 400.

An agent's :class:`Context` bounds that. When the request a model step is about to make would
pass ``max_input_tokens``, the step first **compacts**: one model call summarizes the older
turns, and the turns from the ``keep_recent_turns``-th last model turn on are kept as they are.
From then on requests are the instructions, the summary and the turns after it, until the next
compaction. The transcript keeps every turn (the inspector and the API show them all); the
compaction is a transcript chunk of its own that holds the summary and a copy of the kept turns,
and a model step reads the transcript from the last such chunk on
(:attr:`ackloop.store.Transcript.view`).

A cut is made only before a model turn: a model's function calls and the responses that follow
them are never separated, and the kept turns go back to the model byte for byte (thought
signatures included). Between two compactions each request starts with the previous one, so
Gemini's implicit cache applies.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ackloop.domain.jsondict import JsonDict

SUMMARY_INSTRUCTIONS = """\
You compact the history of a conversation between a user and an AI agent that calls tools.
Write a summary that lets the agent carry on without the turns it replaces: the user's goals and
requests (the latest one word for word), what the agent has found out and decided, the results
of the tool calls that still matter (names, ids, numbers, exact values), what was promised or is
still open, and the user's preferences. Leave out what no longer matters. Write plain text, no
preamble.""".strip()
"""What the summarizer is asked to write (the default; :attr:`Context.summary_instructions`):
the last user content of a compaction's request, whose system instruction and tools are the
agent's own so that the request shares its cached prefix."""

SUMMARY_REQUEST = "Write the summary of the conversation above now."
"""The user text that ends a compaction's request, after the turns it summarizes."""

SUMMARY_HEADER = "Summary of the earlier part of this conversation (its turns are not shown):"
"""How a summary is put before the kept turns, as a user content."""

BYTES_PER_TOKEN = 4
"""What a token is taken to be where no model has counted: about four bytes of English text
(JSON's punctuation makes that a slight overestimate, which errs toward compacting early)."""


@dataclass(frozen=True)
class Context:
    """An agent's context policy.

    ``max_input_tokens``: compact when the next request would be larger (None: never, until
    Gemini refuses a request as too long, which compacts and retries once). ``keep_recent_turns``:
    model turns kept as they are (the tool responses that follow them too). ``summarizer``: the
    model that writes the summary (None: the agent's). ``summary_instructions``: what it is
    asked to write (the request's last user content; its system instruction and tools are the
    agent's, so that Gemini's cache serves the history it shares with the agent's requests).
    ``min_summarized_turns``: a compaction that would replace fewer model turns than this is
    not made (the request goes as it is).
    """

    max_input_tokens: int | None = 64_000
    keep_recent_turns: int = 4
    summarizer: str | None = None
    summary_instructions: str = SUMMARY_INSTRUCTIONS
    min_summarized_turns: int = 1

    def __post_init__(self) -> None:
        if self.max_input_tokens is not None and self.max_input_tokens < 1:
            raise ValueError(f"max_input_tokens must be positive or None, got "
                             f"{self.max_input_tokens}")
        if self.keep_recent_turns < 1:
            # The last model turn may have asked for the calls this turn answers: it is kept,
            # so a call is never summarized away from its responses.
            raise ValueError(f"keep_recent_turns must be 1 or more, got {self.keep_recent_turns}")
        if self.min_summarized_turns < 1:
            raise ValueError("min_summarized_turns must be 1 or more")
        if not self.summary_instructions.strip():
            raise ValueError("summary_instructions must not be empty")

    @classmethod
    def unbounded(cls) -> Context:
        """No compaction before Gemini refuses a request as too long."""
        return cls(max_input_tokens=None)

    def over(self, tokens: int) -> bool:
        """Whether a request of ``tokens`` input tokens is past the budget."""
        return self.max_input_tokens is not None and tokens > self.max_input_tokens


DEFAULT_CONTEXT = Context()


def tokens_of_bytes(size: int) -> int:
    return math.ceil(size / BYTES_PER_TOKEN)


def json_size(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def cut_index(contents: Sequence[JsonDict], keep_recent_turns: int,
              min_summarized_turns: int = 1) -> int | None:
    """Where to cut ``contents`` (the transcript's view) so that the last
    ``keep_recent_turns`` model turns are kept: the index of a model content, so no call is
    separated from its responses. None when too little would be summarized: nothing, or fewer
    than ``min_summarized_turns`` model turns (0: a previous summary alone is summarized
    again, shorter)."""
    models = [i for i, c in enumerate(contents) if c.get("role") == "model"]
    if len(models) < keep_recent_turns:
        return None
    cut = models[-keep_recent_turns]
    if cut == 0 or sum(1 for i in models if i < cut) < min_summarized_turns:
        return None
    return cut


def summary_content(summary: str) -> JsonDict:
    """The user content a summary stands in, before the kept turns."""
    return {"role": "user", "parts": [{"text": f"{SUMMARY_HEADER}\n\n{summary}"}]}


def summary_request_contents(to_summarize: Sequence[JsonDict],
                             instructions: str = SUMMARY_INSTRUCTIONS) -> list[JsonDict]:
    """The contents of a compaction's request: the turns it replaces (a previous summary
    first, where there is one), as the agent's own requests sent them, then the request for
    the summary with the summarizer's ``instructions``. Everything before that last content
    is a prefix of the agent's earlier requests, which Gemini's implicit cache serves."""
    return [*to_summarize,
            {"role": "user", "parts": [{"text": f"{instructions}\n\n{SUMMARY_REQUEST}"}]}]


def is_summary_request(contents: Sequence[JsonDict]) -> bool:
    """Whether ``contents`` end with a compaction's request (a scripted model answers it)."""
    if not contents:
        return False
    parts = contents[-1].get("parts") or []
    return (contents[-1].get("role") == "user" and len(parts) == 1
            and str(parts[0].get("text") or "").endswith(SUMMARY_REQUEST))
