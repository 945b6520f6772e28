"""Gemini through google-genai: one ``generateContent`` call per :meth:`GeminiModel.generate`,
or one ``streamGenerateContent`` call per :meth:`GeminiModel.generate_streaming`.

The SDK's own retries and automatic function calling are off: a failed call is retried by
redelivering the step, and every tool call must be a step of its own. A streamed answer's chunks
are joined into the one turn a unary call would have returned.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable

from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from pydantic import ValidationError

from ackloop.config.settings import Settings
from ackloop.domain.errors import ModelPermanentError
from ackloop.model.base import ModelRequest, ModelTurn, TextSink
from ackloop.model.gemini_errors import TRANSPORT_ERRORS, from_api_error, from_transport_error
from ackloop.model.gemini_turn import turn_from_response
from ackloop.model.validated import validated
from ackloop.telemetry.masking import register_secret

_NO_RETRIES = types.HttpRetryOptions(attempts=1)


class GeminiModel:
    """A :class:`ModelClient` for the Gemini Developer API or Vertex AI.

    Build one per process and share it. ``base_url`` points the SDK at another endpoint (a local
    server speaking the Gemini REST API, in tests). ``timeout_seconds`` caps every call; a
    request's own ``timeout_seconds`` can only shorten it.
    """

    provider = "gemini"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        vertexai: bool = False,
        project: str | None = None,
        location: str | None = None,
        timeout_seconds: float = 60.0,
    ) -> None:
        if not vertexai and not api_key:
            raise ValueError("the Gemini Developer API needs an api_key (or use vertexai=True)")
        self.timeout_seconds = timeout_seconds
        http_options = types.HttpOptions(
            base_url=base_url, timeout=_millis(timeout_seconds), retry_options=_NO_RETRIES,
            # The SDK builds an SSL context (a load of the CA bundle, 20 ms of CPU) for the Live
            # API's websocket unless given one; ackloop never opens it. True: websockets would
            # make a default context when connecting; the HTTP client ignores the argument.
            # Not on Vertex AI, where the SDK also reads it to choose its mTLS transport.
            async_client_args=None if vertexai else {"ssl": True},
        )
        if vertexai:
            self._client = genai.Client(
                vertexai=True, project=project, location=location, http_options=http_options
            )
        else:
            self._client = genai.Client(api_key=api_key, http_options=http_options)

    async def generate(self, request: ModelRequest) -> ModelTurn:
        """Call Gemini once. Raises ``ModelRetryableError`` or ``ModelPermanentError``."""
        contents, config = self._prepare(request)
        return await _answered(lambda: self._client.aio.models.generate_content(
            model=request.model, contents=contents, config=config))

    async def generate_streaming(self, request: ModelRequest, on_text: TextSink) -> ModelTurn:
        """Call Gemini once, streamed: ``on_text`` gets each chunk's answer text as it arrives;
        the turn returned joins the chunks. Raises like :meth:`generate`, also after some text
        was handed out (the turn is then lost, and the text with it)."""
        contents, config = self._prepare(request)

        async def joined() -> types.GenerateContentResponse:
            stream: AsyncIterator[types.GenerateContentResponse] = (
                await self._client.aio.models.generate_content_stream(
                    model=request.model, contents=contents, config=config))
            chunks = []
            async for chunk in stream:
                chunks.append(chunk)
                text = _answer_text(chunk)
                if text:
                    on_text(text)
            return join_chunks(chunks)

        return await _answered(joined)

    def _prepare(
        self, request: ModelRequest
    ) -> tuple[list[types.Content], types.GenerateContentConfig]:
        try:
            # Once per distinct content per process: a run's history comes back whole on every
            # call (ackloop.model.validated).
            contents = [validated(types.Content, content) for content in request.contents]
            declarations = [validated(types.FunctionDeclaration, d) for d in request.tools]
        except ValidationError as error:
            raise ModelPermanentError(
                f"request does not fit the Gemini schema: {error}", reason="model_invalid_request"
            ) from error
        timeout = min(self.timeout_seconds, request.timeout_seconds)
        schema = request.response_schema
        config = types.GenerateContentConfig(
            system_instruction=request.system_instruction or None,
            tools=[types.Tool(function_declarations=declarations)] if declarations else None,
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            tool_config=None if request.calls_allowed or not declarations else types.ToolConfig(
                function_calling_config=types.FunctionCallingConfig(
                    mode=types.FunctionCallingConfigMode.NONE)),
            response_mime_type="application/json" if schema is not None else None,
            response_json_schema=schema,
            http_options=types.HttpOptions(timeout=_millis(timeout), retry_options=_NO_RETRIES),
        )
        return contents, config


async def _answered(call: Callable[[], Awaitable[types.GenerateContentResponse]]) -> ModelTurn:
    """The turn of one call, its failures mapped onto the retryable / permanent errors."""
    try:
        response = await call()
    except genai_errors.APIError as error:
        raise from_api_error(error) from error
    except TRANSPORT_ERRORS as error:
        raise from_transport_error(error) from error
    except (json.JSONDecodeError, genai_errors.UnknownApiResponseError, ValidationError) as error:
        # A 200 whose body (or a streamed chunk) is not JSON, or JSON of the wrong shape.
        raise ModelPermanentError(
            f"Gemini answered with a body that does not parse: {error}",
            reason="model_malformed_response",
        ) from error
    return turn_from_response(response)


def _answer_text(chunk: types.GenerateContentResponse) -> str:
    """The answer text of one chunk (thoughts are not the answer)."""
    content = chunk.candidates[0].content if chunk.candidates else None
    parts = content.parts if content is not None and content.parts else []
    return "".join(p.text for p in parts if p.text and not p.thought)


def join_chunks(chunks: list[types.GenerateContentResponse]) -> types.GenerateContentResponse:
    """One response holding what the chunks of a stream say, as a unary call would answer.

    Consecutive text parts of the same kind (answer or thought) become one part, which keeps
    the last thought signature among them (Gemini may send it on a chunk with empty text);
    function calls and other parts stay as they came. The finish reason, usage and model
    version are the last ones sent; a blocked prompt's feedback is kept.
    """
    parts: list[types.Part] = []
    finish_reason = None
    for chunk in chunks:
        candidate = chunk.candidates[0] if chunk.candidates else None
        if candidate is None:
            continue
        finish_reason = candidate.finish_reason or finish_reason
        for part in (candidate.content.parts if candidate.content else None) or []:
            last = parts[-1] if parts else None
            if (part.text is not None and last is not None and last.text is not None
                    and bool(last.thought) == bool(part.thought)):
                parts[-1] = last.model_copy(update={
                    "text": last.text + part.text,
                    "thought_signature": part.thought_signature or last.thought_signature})
            else:
                parts.append(part)
    candidates = [types.Candidate(content=types.Content(role="model", parts=parts) if parts
                                  else None, finish_reason=finish_reason, index=0)]
    if not parts and finish_reason is None:
        candidates = []
    return types.GenerateContentResponse(
        candidates=candidates,
        prompt_feedback=next((c.prompt_feedback for c in chunks if c.prompt_feedback), None),
        usage_metadata=next((c.usage_metadata for c in reversed(chunks) if c.usage_metadata),
                            None),
        model_version=next((c.model_version for c in reversed(chunks) if c.model_version), None),
    )


def build_gemini_model(settings: Settings) -> GeminiModel:
    """The process's Gemini client, from validated settings."""
    api_key = settings.gemini_api_key.get_secret_value() if settings.gemini_api_key else None
    register_secret(api_key)  # an upstream that echoes it must not put it in a record or a log
    return GeminiModel(
        api_key=api_key,
        base_url=settings.gemini_base_url,
        vertexai=settings.use_vertexai,
        project=settings.project_id if settings.use_vertexai else None,
        location=settings.vertex_location if settings.use_vertexai else None,
        timeout_seconds=settings.model_timeout_seconds,
    )


def _millis(seconds: float) -> int:
    # HttpOptions.timeout is in milliseconds.
    return max(1, round(seconds * 1000))
