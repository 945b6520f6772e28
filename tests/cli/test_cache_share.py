"""What ``ackloop runs show`` and ``ackloop ask`` print of the prompt tokens Gemini served from
its cache: the count and its share of the prompt, on the cost line and the usage line."""

from __future__ import annotations

from ackloop.cli.follow import cost_line
from ackloop.cli.runs import usage_line
from ackloop.domain.cost import Spend, price
from ackloop.domain.wire import Usage


def test_the_cost_line_shows_the_cached_share_of_the_prompt() -> None:
    cost = price(Spend(model="gemini-2.5-flash", prompt_tokens=2_000, output_tokens=100,
                       cached_tokens=1_500))
    assert cost_line(cost).startswith(f"${cost.usd:.6f}: 2,000 prompt (1,500 cached, 75%) + "
                                      "100 output tokens, ")
    plain = price(Spend(model="gemini-2.5-flash", prompt_tokens=2_000, output_tokens=100))
    assert cost_line(plain).startswith(f"${plain.usd:.6f}: 2,000 prompt + 100 output tokens, ")


def test_the_usage_line_shows_the_cached_share_only_when_there_is_one() -> None:
    used = Usage(model_calls=2, tool_calls=1, prompt_tokens=400, output_tokens=20,
                 total_tokens=420, cached_tokens=100)
    assert usage_line(used) == ("2 model call(s), 1 tool call(s), 420 token(s); 100 of its 400 "
                                "prompt token(s) from Gemini's cache (25%)")
    assert usage_line(used.model_copy(update={"cached_tokens": 0})) == (
        "2 model call(s), 1 tool call(s), 420 token(s)")
