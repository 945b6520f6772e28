"""mask_secrets and the logging filter that applies it."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from ackloop.telemetry.masking import SecretMaskingFilter, install_secret_masking, mask_secrets

GOOGLE_KEY = "AIzaSyA1234567890abcdefghijklmnopqrstuv"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("GET https://x.example/a?apikey=s3cr3t&q=1", "GET https://x.example/a?apikey=***&q=1"),
        ("url ...?key=abc123&alt=json", "url ...?key=***&alt=json"),
        ("GOOGLE_API_KEY=abc123", "GOOGLE_API_KEY=***"),
        ('{"api_key": "abc123"}', '{"api_key": "***"}'),
        ("x-goog-api-key: abc123", "x-goog-api-key: ***"),
        (f"the key {GOOGLE_KEY} leaked", "the key *** leaked"),
        ("Authorization: Bearer eyJhbGciOi.abc", "Authorization: Bearer ***"),
        ("{'Authorization': 'Basic dXNlcjpwdw=='}", "{'Authorization': 'Basic ***'}"),
        ("sent bearer abc.def-ghi", "sent bearer ***"),
        ("password=hunter2 token: t0k secret='xyz'", "password=*** token: *** secret='***'"),
        (
            "client_secret=1 access_token=2 refresh-token=3",
            "client_secret=*** access_token=*** refresh-token=***",
        ),
        ("postgresql://admin:hunter2@db:5432/app", "postgresql://admin:***@db:5432/app"),
        ("https://user:p%40ss@host.example/path", "https://user:***@host.example/path"),
    ],
)
def test_common_secret_shapes_are_masked(text: str, expected: str) -> None:
    assert mask_secrets(text) == expected


def test_prose_after_the_word_bearer_stays_readable() -> None:
    text = "ACKLOOP_API_AUTH=bearer needs ACKLOOP_API_BEARER_TOKEN_FILE"
    assert mask_secrets(text) == text
    assert mask_secrets("bearer Zx9kQ") == "bearer ***"
    assert mask_secrets("bearer abcdefghijklmnopqrstuvwxyz") == "bearer ***"


def test_ids_and_counts_stay_readable() -> None:
    text = "step_key=run-1:t2 idempotency_key=abc max_tokens=512 total_tokens: 9 monkey=1"
    assert mask_secrets(text) == text


def test_masking_is_idempotent() -> None:
    once = mask_secrets("password=hunter2 Authorization: Bearer abc")
    assert mask_secrets(once) == once


def test_known_literal_secrets_are_masked() -> None:
    assert mask_secrets("token is q9-lit", known=["q9-lit"]) == "token is ***"


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("test.masking")
    logger.propagate = False
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield logger, stream
    logger.removeHandler(handler)


def test_the_filter_masks_message_arguments_and_traceback(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    install_secret_masking(logger)
    try:
        raise RuntimeError("GET https://bot:hunter2@api.example.com?api_key=zzz failed")
    except RuntimeError:
        logger.exception("calling with %s", {"Authorization": "Bearer abc.def"})

    output = stream.getvalue()
    assert "calling with {'Authorization': 'Bearer ***'}" in output
    assert "https://bot:***@api.example.com?api_key=***" in output
    assert "Traceback" in output
    assert "hunter2" not in output and "zzz" not in output and "abc.def" not in output


def test_the_filter_masks_known_secrets(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logger.handlers[0].addFilter(SecretMaskingFilter(known=[GOOGLE_KEY[:20]]))
    logger.info("partial %s", GOOGLE_KEY[:20])
    assert stream.getvalue() == "INFO partial ***\n"
