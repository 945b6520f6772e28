"""Turn a google-genai ``GenerateContentResponse`` into a :class:`ModelTurn`, or say why not."""

from __future__ import annotations

from google.genai import types
from pydantic import ValidationError

from ackloop.domain.errors import ModelPermanentError, ModelRetryableError
from ackloop.domain.wire import FunctionCall, Usage
from ackloop.model.base import ModelTurn

BLOCKED_FINISH_REASONS = frozenset(
    {"SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "RECITATION", "IMAGE_SAFETY"}
)
"""Finish reasons meaning a content policy stopped the answer: asking again will not help."""
# The model wrote a call that does not parse; sampling again usually produces a valid one.
RETRYABLE_FINISH_REASONS = frozenset({"MALFORMED_FUNCTION_CALL"})


def turn_from_response(response: types.GenerateContentResponse) -> ModelTurn:
    """Parts (raw, thought signatures included), calls, answer text, usage and finish reason.

    Raises ``ModelPermanentError`` with reason ``model_safety_block`` (prompt or answer blocked),
    ``model_empty_response`` (no candidate or no parts) or ``model_malformed_response``
    (a call without a name); ``ModelRetryableError`` for a malformed function call.
    """
    feedback = response.prompt_feedback
    if feedback is not None and feedback.block_reason is not None:
        raise ModelPermanentError(
            f"Gemini blocked the prompt: {_name(feedback.block_reason)} "
            f"{feedback.block_reason_message or ''}".strip(),
            reason="model_safety_block",
        )
    if not response.candidates:
        raise ModelPermanentError("Gemini returned no candidates", reason="model_empty_response")
    candidate = response.candidates[0]
    finish_reason = _name(candidate.finish_reason) if candidate.finish_reason else None
    if finish_reason in BLOCKED_FINISH_REASONS:
        raise ModelPermanentError(
            f"Gemini stopped the answer: {finish_reason}", reason="model_safety_block"
        )
    if finish_reason in RETRYABLE_FINISH_REASONS:
        raise ModelRetryableError(f"Gemini stopped the answer: {finish_reason}")
    if candidate.content is None or not candidate.content.parts:
        raise ModelPermanentError(
            f"Gemini returned a candidate without content (finish_reason={finish_reason})",
            reason="model_empty_response",
        )
    parts = candidate.content.parts
    return ModelTurn(
        parts=[part.model_dump(mode="json", exclude_none=True) for part in parts],
        calls=_calls(parts),
        text=_text(parts),
        usage=_usage(response.usage_metadata),
        finish_reason=finish_reason,
        model_version=response.model_version,
    )


def _calls(parts: list[types.Part]) -> list[FunctionCall]:
    calls: list[FunctionCall] = []
    for part in parts:
        call = part.function_call
        if call is None:
            continue
        try:
            calls.append(FunctionCall(name=call.name or "", args=dict(call.args or {}), id=call.id))
        except ValidationError as error:
            raise ModelPermanentError(
                f"Gemini returned an unusable function call: {error}",
                reason="model_malformed_response",
            ) from error
    return calls


def _text(parts: list[types.Part]) -> str | None:
    # Gemini may split one answer across several text parts; thoughts are not the answer.
    texts = [part.text for part in parts if part.text is not None and not part.thought]
    return "".join(texts) if texts else None


def _usage(metadata: types.GenerateContentResponseUsageMetadata | None) -> Usage:
    if metadata is None:
        return Usage(model_calls=1)
    prompt = metadata.prompt_token_count or 0
    # Thinking tokens are billed as output; count them where budgets will see them.
    thinking = metadata.thoughts_token_count or 0
    output = (metadata.candidates_token_count or 0) + thinking
    total = metadata.total_token_count or prompt + output
    # Cached tokens are part of the prompt's count (Gemini bills them at the cached rate).
    cached = min(metadata.cached_content_token_count or 0, prompt)
    return Usage(model_calls=1, prompt_tokens=prompt, output_tokens=output, total_tokens=total,
                 cached_tokens=cached, thinking_tokens=thinking)


def _name(value: object) -> str:
    """Enum members and unknown strings alike, as the API spells them."""
    return str(getattr(value, "value", value))
