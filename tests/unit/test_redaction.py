"""Secrets stay out of what memoryd writes: masked log values, URLs without credentials."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from memoryd.shared.adapters.nats_log import MSG_ID, Outgoing, PayloadTooLarge, check_size
from memoryd.shared.logging import Redactor
from memoryd.shared.settings import Settings, public_url, url_password


def test_the_redactor_masks_every_known_secret_in_every_value() -> None:
    redactor = Redactor()
    redactor.add(["sk-abcdef123", "short", "pw-999999"])
    event = {
        "event": "llm_failed",
        "error": "401: Incorrect API key provided: sk-abcdef123",
        "detail": ValueError("password pw-999999 refused"),
        "count": 3,
    }
    scrubbed = redactor(None, "warning", event)
    assert "401: Incorrect API key provided: ***" == scrubbed["error"]
    assert "password *** refused" == scrubbed["detail"]
    assert 3 == scrubbed["count"]
    assert "a short word" == redactor.scrub("a short word")  # too short to be a secret


def test_urls_are_logged_without_their_credentials() -> None:
    url = "postgresql+asyncpg://app:s3cr%40t@db.example:5432/memoryd"
    assert "postgresql+asyncpg://***@db.example:5432/memoryd" == public_url(url)
    assert "s3cr@t" == url_password(url)
    cluster = "nats://u:p1@a:4222,nats://b:4223"
    assert "nats://***@a:4222,nats://b:4223" == public_url(cluster)
    assert "nats://127.0.0.1:4222" == public_url("nats://127.0.0.1:4222")


def test_settings_hold_secrets_that_never_print() -> None:
    settings = Settings(
        llm_api_key=SecretStr("sk-llm-123456"),
        nats_password=SecretStr("nats-pw-123456"),
        database_url="postgresql+asyncpg://u:db-pw-123456@h:5432/d",
    )
    shown = repr(settings) + str(settings.model_dump())
    assert "sk-llm-123456" not in shown and "nats-pw-123456" not in shown
    assert {"sk-llm-123456", "nats-pw-123456", "db-pw-123456"} == set(settings.secrets())


def test_a_message_larger_than_the_server_accepts_is_refused_unsent() -> None:
    message = Outgoing("memoryd.ev.t.u.turn_recorded_v1", b"x" * 2_000, {MSG_ID: "id-1"})
    check_size(message, 4_096)
    with pytest.raises(PayloadTooLarge, match=r"is 2,0\d\d bytes; .* at most 1,024"):
        check_size(message, 1_024)
