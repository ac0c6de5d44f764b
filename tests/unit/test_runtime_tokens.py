"""A token grants a tenant and what its entry names; a request may fill in only the rest."""

from __future__ import annotations

import json

import pytest

from memoryd.services.runtime.tokens import (
    Grant,
    ScopeOverride,
    bearer_token,
    parse_tokens,
    token_digest,
)
from memoryd.shared.contracts import Scope

TOKEN = "app-of-acme-0123456789"


def test_a_tenant_wide_grant_takes_the_user_and_agent_the_request_names() -> None:
    """A grant of only a tenant serves whichever user and agent the request names."""
    grant = Grant(tenant="acme")

    assert grant.tenant_wide
    assert Scope(tenant="acme", user_id="bob", agent_id="bot") == grant.scope(
        {"user_id": "bob", "agent_id": "bot"}
    )


def test_a_user_grant_keeps_its_user_and_accepts_it_named_again() -> None:
    """A user-bound grant serves its user, also when the request names that same user."""
    grant = Grant(tenant="acme", user_id="alice")

    assert Scope(tenant="acme", user_id="alice") == grant.scope({})
    assert Scope(tenant="acme", user_id="alice") == grant.scope({"user_id": "alice"})
    assert not grant.tenant_wide


@pytest.mark.parametrize("name", ["tenant", "user_id", "agent_id"])
def test_naming_a_bound_field_differently_is_refused(name: str) -> None:
    """A request cannot override the tenant, user or agent its token binds."""
    grant = Grant(tenant="acme", user_id="alice", agent_id="bot")

    with pytest.raises(ScopeOverride) as refused:
        grant.bound(name, "other")

    assert f"{name}: this token is bound to another {name}" == str(refused.value)
    with pytest.raises(ScopeOverride):
        grant.scope({name: "other"})


def test_a_grant_file_may_leave_out_the_user_but_not_the_tenant() -> None:
    """Grants parse from the same token file shape; an entry without a tenant is refused."""
    text = json.dumps({TOKEN: {"tenant": "acme"}})

    assert {token_digest(TOKEN): Grant(tenant="acme")} == parse_tokens(text, Grant.model_validate)
    with pytest.raises(ValueError) as refused:
        parse_tokens(json.dumps({TOKEN: {"user_id": "a"}}), Grant.model_validate)
    assert str(refused.value).startswith("token #1: tenant: Field required")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Basic abc", None),
        ("Bearer ", None),
        (None, None),
    ],
)
def test_the_bearer_token_is_read_from_the_authorization_header(
    header: str | None, expected: str | None
) -> None:
    """Only a Bearer scheme with a token yields one."""
    assert expected == bearer_token(header)
