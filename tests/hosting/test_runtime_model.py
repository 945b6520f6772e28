"""A service that never calls the model gets a client built on its first call, yet checked at
start-up: a misconfigured model stops every process, and the API key is masked everywhere."""

from __future__ import annotations

import pytest

from ackloop.agents.agent import AgentRegistry
from ackloop.config.settings import Settings
from ackloop.hosting import runtime
from ackloop.model.base import ModelClient, ModelRequest, ModelTurn
from ackloop.telemetry.masking import mask_secrets


class _Model:
    provider = "fake"

    async def generate(self, request: ModelRequest) -> ModelTurn:
        return ModelTurn(parts=[], text="answer")


def _settings(**values: object) -> Settings:
    return Settings.model_validate({"project_id": "p", **values})


async def test_a_deferred_model_is_built_once_on_its_first_call() -> None:
    built: list[ModelClient] = []

    def build() -> ModelClient:
        built.append(_Model())
        return built[-1]

    model = runtime.DeferredModel("fake", build)
    assert (model.provider, model.built, built) == ("fake", False, [])
    request = ModelRequest(model="m", system_instruction="", contents=[])
    assert (await model.generate(request)).text == "answer"
    assert (await model.generate(request)).text == "answer"
    assert model.built and len(built) == 1


@pytest.mark.parametrize(("target", "deferred"), [("model_step", False), (None, False),
                                                  ("tool_step", True), ("ingest", True),
                                                  ("dead_letter", True), ("api", True)])
def test_only_the_model_step_builds_its_model_before_serving(target: str | None,
                                                              deferred: bool) -> None:
    settings = _settings(model_provider="scripted")
    model = runtime.model_for(settings, AgentRegistry([]), target)
    assert isinstance(model, runtime.DeferredModel) is deferred
    assert model.provider == "scripted"


def test_a_deferred_gemini_without_credentials_is_refused_at_once() -> None:
    settings = _settings(model_provider="gemini")
    with pytest.raises(ValueError, match="api_key"):
        runtime.model_for(settings, AgentRegistry([]), "tool_step")


def test_a_deferred_gemini_masks_its_key_as_a_built_one_does() -> None:
    settings = _settings(model_provider="gemini", gemini_api_key="key-for-the-check-0123")
    model = runtime.model_for(settings, AgentRegistry([]), "tool_step")
    assert model.provider == "gemini" and not isinstance(model, _Model)
    assert "key-for-the-check-0123" not in mask_secrets("echoed key-for-the-check-0123")
