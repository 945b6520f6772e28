"""The model line of ``dev up`` describes what the functions' settings select, and how it is
reached: never "scripted" when a Gemini key or Vertex AI is configured."""

from __future__ import annotations

from pydantic import SecretStr

from ackloop.config.settings import Settings
from ackloop_dev.devstack.stack import describe_model


def test_without_credentials_the_functions_use_the_scripted_model() -> None:
    assert describe_model(Settings(model_provider="auto", gemini_api_key=None,
                                   use_vertexai=False)).startswith("the scripted offline model")


def test_an_api_key_means_gemini_through_the_developer_api() -> None:
    line = describe_model(Settings(gemini_api_key=SecretStr("k"), model="gemini-x"))
    assert line == "Gemini gemini-x with an API key (Gemini Developer API)"


def test_vertex_ai_names_the_project_and_location() -> None:
    # Fields with a validation alias are set by their variable's name.
    settings = Settings(model="gemini-x", gemini_api_key=None, **{
        "ACKLOOP_USE_VERTEXAI": True, "ACKLOOP_PROJECT_ID": "p1",
        "ACKLOOP_VERTEX_LOCATION": "europe-west1"})
    line = describe_model(settings)
    assert line == "Gemini gemini-x on Vertex AI (project p1, location europe-west1)"


def test_the_fake_gemini_server_is_named_as_such() -> None:
    url = "http://127.0.0.1:8101"
    settings = Settings(model_provider="gemini", gemini_api_key=SecretStr("local-fake-key"),
                        gemini_base_url=url, model="gemini-x")
    assert describe_model(settings, url) == (
        f"gemini-x from the fake Gemini REST server at {url} (scripted replies, through "
        "google-genai)")
    assert describe_model(settings).endswith(f"with an API key (Gemini Developer API) at {url}")
