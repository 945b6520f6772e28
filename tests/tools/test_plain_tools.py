"""Tools as plain annotated functions, sync or async: the schema from the parameters, the
descriptions from the docstring, sync handlers off the event loop, and the signatures refused."""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from typing import Annotated, Any, Literal

import pytest
from google.genai import types
from pydantic import BaseModel, Field
from tests.engine.fakes import make_loop

from ackloop import FinalResult, ToolContext, ToolError, ToolSet, tool
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.wire import FunctionCall, QueryMessage
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.transcript import read_exchange
from ackloop.model.turns import calls_turn, text_turn
from ackloop.tools.docstrings import parse_docstring


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Place(BaseModel):
    """A place on the map."""

    city: str = Field(description="City name.")
    country: str = "BR"


@tool
def forecast(
    city: str,
    days: Annotated[int, Field(ge=1, le=7)] = 1,
    note: Annotated[str, "A free note for the forecaster."] = "",
    unit: Unit = Unit.CELSIUS,
    kind: Literal["daily", "hourly"] = "daily",
    lang: str | None = None,
    tags: list[str] | None = None,
    home: Annotated[Place, "Where the user lives."] | None = None,
    ratio: Annotated[float, Field(gt=0, description="Share of sun.")] = 0.5,
    *,
    context: ToolContext,
) -> dict[str, Any]:
    """Forecast the weather for a city.

    Uses the national service.

    Args:
        city: The city, in English.
        days: How many days
            ahead, counting today.
        unit: Temperature unit.
        lang (str, optional): Language of the summary.
        ratio: Not used: the Field's own description wins.

    Returns:
        The forecast.
    """
    return {
        "city": city,
        "days": days,
        "unit": unit.value,
        "kind": kind,
        "lang": lang,
        "tags": tags,
        "home": home.city if home else None,
        "thread": threading.current_thread().name,
        "run": context.run_id,
    }


def properties(declared: Any) -> dict[str, Any]:
    return dict(declared.declaration()["parameters"]["properties"])


def test_description_is_the_docstring_up_to_its_first_section() -> None:
    assert forecast.description == "Forecast the weather for a city.\n\nUses the national service."


def test_the_schema_covers_every_kind_of_parameter() -> None:
    declared = forecast.declaration()
    props = declared["parameters"]["properties"]
    assert declared["parameters"]["required"] == ["city"]
    assert list(props) == ["city", "days", "note", "unit", "kind", "lang", "tags", "home", "ratio"]
    assert props["city"] == {"type": "string", "description": "The city, in English."}
    assert props["days"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 7,
        "description": "How many days ahead, counting today.",
    }
    assert props["note"] == {"type": "string", "description": "A free note for the forecaster."}
    assert props["unit"] == {
        "type": "string",
        "enum": ["celsius", "fahrenheit"],
        "description": "Temperature unit.",
    }
    assert props["kind"] == {"type": "string", "enum": ["daily", "hourly"]}
    assert props["lang"] == {
        "type": "string",
        "nullable": True,
        "description": "Language of the summary.",
    }
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "nullable": True}
    assert props["home"]["type"] == "object"
    assert props["home"]["nullable"] is True
    assert props["home"]["required"] == ["city"]
    assert props["ratio"] == {
        "type": "number",
        "description": "Share of sun. (must be greater than 0)",
    }


def test_the_declaration_is_one_google_genai_accepts() -> None:
    checked = types.FunctionDeclaration.model_validate(forecast.declaration())
    assert checked.parameters is not None
    assert checked.parameters.properties is not None
    assert set(checked.parameters.properties) == set(properties(forecast))


def test_a_nested_model_argument_is_annotated() -> None:
    @tool
    async def ship(item: str, to: Annotated[Place, "Where to ship it."]) -> str:
        """Ship an item."""
        return f"{item} to {to.city}"

    props = properties(ship)
    assert props["to"]["description"] == "Where to ship it."
    assert props["to"]["properties"]["city"] == {"type": "string", "description": "City name."}
    assert ship.arg_name is None


async def test_values_reach_the_function_validated_and_typed(context: ToolContext) -> None:
    outcome = await ToolSet([forecast]).execute(
        FunctionCall(
            name="forecast",
            args={"city": "Picos", "days": "3", "unit": "fahrenheit", "home": {"city": "Oeiras"}},
        ),
        context,
    )
    result = outcome.response["result"]
    assert (result["city"], result["days"], result["unit"], result["home"]) == (
        "Picos",
        3,
        "fahrenheit",
        "Oeiras",
    )
    assert result["run"] == "run-1"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({}, "city: is required"),
        ({"city": "Picos", "days": 9}, "days: Input should be less than or equal to 7 (got 9)"),
        ({"city": "Picos", "kind": "weekly"}, "kind: Input should be 'daily' or 'hourly'"),
        ({"city": "Picos", "wind": True}, "wind: is not an argument of this tool"),
    ],
)
async def test_invalid_arguments_are_written_for_the_model(
    context: ToolContext, args: dict[str, Any], expected: str
) -> None:
    outcome = await ToolSet([forecast]).execute(FunctionCall(name="forecast", args=args), context)
    assert outcome.is_error
    message = outcome.response["error"]
    assert message.startswith("invalid arguments for forecast: ")
    assert expected in message
    assert "Accepted arguments: city, days, note, unit, kind, lang, tags, home, ratio." in message


async def test_a_sync_tool_runs_off_the_event_loop(context: ToolContext) -> None:
    @tool
    def slow(seconds: float) -> str:
        """Block for a while, as a sync client would."""
        time.sleep(seconds)
        return threading.current_thread().name

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    try:
        outcome = await ToolSet([slow]).execute(
            FunctionCall(name="slow", args={"seconds": 0.5}), context
        )
    finally:
        ticking.cancel()
    assert outcome.response["result"] != threading.current_thread().name
    # A blocked loop would tick at most once; 0.5 s at 50 ms a tick leaves room to spare.
    assert ticks >= 5, ticks


async def test_a_sync_tool_is_cut_at_its_timeout(context: ToolContext) -> None:
    finished = threading.Event()

    @tool(timeout_seconds=0.2)
    def stuck() -> str:
        """Hang past the timeout."""
        time.sleep(0.6)
        finished.set()
        return "late"

    outcome = await ToolSet([stuck]).execute(FunctionCall(name="stuck", args={}), context)
    assert outcome.response == {
        "error": "stuck timed out after 0.2 s; try again later or continue without it"
    }
    # The thread cannot be killed: it runs to its end after the step recorded the timeout.
    assert not finished.is_set()
    assert await asyncio.to_thread(finished.wait, 5)


async def test_sync_tools_raise_tool_errors_and_final_results(context: ToolContext) -> None:
    @tool
    def check(order_id: str) -> str:
        """Check an order."""
        if order_id == "done":
            raise FinalResult({"order": order_id})
        raise ToolError(f"there is no order {order_id}; check the number")

    tools = ToolSet([check])
    missing = await tools.execute(FunctionCall(name="check", args={"order_id": "A-1"}), context)
    assert missing.response == {"error": "there is no order A-1; check the number"}
    final = await tools.execute(FunctionCall(name="check", args={"order_id": "done"}), context)
    assert final.final and final.response == {"result": {"order": "done"}}


async def test_the_context_is_found_by_name_or_by_annotation(context: ToolContext) -> None:
    @tool
    async def by_name(city: str, context) -> str:  # type: ignore[no-untyped-def]
        """By name."""
        return f"{city} {context.step_key}"

    @tool
    def by_annotation(city: str, where: ToolContext) -> str:
        """By annotation."""
        return f"{city} {where.step_key}"

    tools = ToolSet([by_name, by_annotation])
    for name in ("by_name", "by_annotation"):
        outcome = await tools.execute(FunctionCall(name=name, args={"city": "Picos"}), context)
        assert outcome.response == {"result": "Picos run-1:t1:c0"}
        assert list(properties(tools.get(name))) == ["city"]


async def test_a_parameter_named_like_a_model_method_still_works(context: ToolContext) -> None:
    @tool
    def render(json: bool = False, copy: int = 1) -> str:
        """Render."""
        return f"{json} {copy}"

    outcome = await ToolSet([render]).execute(
        FunctionCall(name="render", args={"json": True, "copy": 2}), context
    )
    assert outcome.response == {"result": "True 2"}


async def test_a_lone_model_parameter_is_still_the_whole_arguments(context: ToolContext) -> None:
    @tool
    def locate(place: Place) -> str:
        """Locate a place."""
        return f"{place.city}/{place.country}"

    assert locate.args_model is Place
    assert locate.arg_name == "place"
    outcome = await ToolSet([locate]).execute(
        FunctionCall(name="locate", args={"city": "Picos"}), context
    )
    assert outcome.response == {"result": "Picos/BR"}


def test_a_tool_without_parameters_declares_none() -> None:
    @tool
    def now() -> str:
        """The time."""
        return "noon"

    assert "parameters" not in now.declaration()


def refused(fn: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        tool(fn)


def test_star_args_and_kwargs_are_refused() -> None:
    def many(*cities: str) -> str:
        """Many."""
        return ""

    def loose(**options: str) -> str:
        """Loose."""
        return ""

    refused(many, r"many: \*cities cannot be declared to the model; name each argument")
    refused(loose, r"loose: \*\*options cannot be declared to the model")


def test_positional_only_parameters_are_refused() -> None:
    def only(city: str, /) -> str:
        """Only."""
        return city

    refused(only, r"only: parameter 'city' is positional-only; .* remove the '/'")


def test_unannotated_parameters_are_refused() -> None:
    def bare(city) -> str:  # type: ignore[no-untyped-def]
        """Bare."""
        return str(city)

    refused(bare, r"bare: parameter 'city' has no annotation; annotate it")


def test_a_context_parameter_of_another_type_is_refused() -> None:
    def odd(context: str) -> str:
        """Odd."""
        return context

    refused(odd, r"odd: parameter 'context' is the ToolContext's name; annotate it ToolContext")


def test_two_contexts_are_refused() -> None:
    def twice(a: ToolContext, context: ToolContext) -> str:
        """Twice."""
        return ""

    refused(twice, r"twice: two ToolContext parameters, 'a' and 'context'")


def test_a_model_beside_plain_parameters_is_refused_with_what_to_do() -> None:
    def mixed(place: Place, days: int) -> str:
        """Mixed."""
        return ""

    refused(
        mixed,
        r"mixed: parameter 'place' is annotated with the Pydantic model Place beside 'days'\. "
        r".*annotate it Annotated\[Place, \"what it is\"\]; otherwise move the other arguments",
    )


def test_two_models_are_refused() -> None:
    def pair(a: Place, b: Place) -> str:
        """Pair."""
        return ""

    refused(pair, r"pair: parameter 'a' is annotated with the Pydantic model Place beside 'b'")


def test_a_private_name_is_refused() -> None:
    def hidden(_city: str) -> str:
        """Hidden."""
        return _city

    refused(hidden, r"hidden: parameter '_city' starts with '_'")


def test_an_annotation_local_to_a_function_is_refused_with_where_to_move_it() -> None:
    def make() -> None:
        class Local(BaseModel):
            x: int

        def local(a: Local, b: int) -> str:
            """Local."""
            return ""

        tool(local)

    # This module's annotations are strings (from __future__), evaluated in the module.
    with pytest.raises(
        TypeError,
        match=r"local: the annotation 'Local' cannot be resolved in "
        r"the function's module; define it at module level",
    ):
        make()


def test_google_docstrings() -> None:
    parsed = parse_docstring(
        "Summary line.\n\nMore.\n\nArgs:\n    city: The city\n        in English.\n"
        "    days (int, optional): Days.\n    **extra: Ignored.\n\nReturns:\n    days: not a param"
    )
    assert parsed.summary == "Summary line.\n\nMore."
    assert parsed.parameters == {
        "city": "The city in English.",
        "days": "Days.",
        "extra": "Ignored.",
    }


def test_rest_docstrings() -> None:
    parsed = parse_docstring(
        "Summary.\n\n:param city: The city\n    in English.\n:param int days: Days.\n"
        ":type days: int\n:returns: nothing"
    )
    assert parsed.summary == "Summary."
    assert parsed.parameters == {"city": "The city in English.", "days": "Days."}


def test_a_docstring_without_sections_is_all_summary() -> None:
    assert parse_docstring("Just this.") == parse_docstring("Just this.\n")
    assert parse_docstring("Just this.").summary == "Just this."
    assert parse_docstring("Just this.").parameters == {}


# -- end to end: a scripted model calls a plain sync tool through the engine --------------------


@tool
def order_status(order_id: Annotated[str, Field(pattern=r"^A-\d{4}$")]) -> dict[str, str]:
    """Find an order's status.

    Args:
        order_id: The order number, e.g. A-1234.
    """
    time.sleep(0.05)  # a blocking client, as many are
    return {"order_id": order_id, "status": "shipped"}


def support_model(request: ModelRequest) -> ModelTurn:
    result = read_exchange(request.contents).last_result("order_status")
    if result is None:
        return calls_turn([("order_status", {"order_id": "A-1234"})], request=request)
    return text_turn(f"Order A-1234 is {result.response['result']['status']}.", request=request)


async def test_a_plain_sync_tool_answers_through_the_engine() -> None:
    loop = make_loop(ScriptedModel(support_model), ToolSet([order_status]))
    await loop.submit(QueryMessage(request_id="plain-sync-1", text="Where is A-1234?"))
    await loop.run_until_idle()
    run = await loop.deps.store.get_run(run_id_for_request("plain-sync-1"))
    assert run is not None
    assert (run.status.value, run.answer) == ("completed", "Order A-1234 is shipped.")
    tool_steps = [s for s in await loop.deps.store.list_steps(run.run_id) if s.kind == "tool"]
    assert [(s.name, (s.result or {}).get("response")) for s in tool_steps] == [
        ("order_status", {"result": {"order_id": "A-1234", "status": "shipped"}})
    ]
