"""The wall between tenants on request-reply: the subject names the tenant, the payload must too."""

from __future__ import annotations

from memoryd.shared import subjects


def tenant_refusal(subject: str, tenant: str) -> str | None:
    """Return why a request for ``tenant`` may not be answered on ``subject`` (None: it may).

    The subject names the tenant (what NATS permissions grant a tenant's credentials); a
    payload naming another one is refused, so a caller allowed on one tenant's subjects
    reads only that tenant.
    """
    named = subjects.rpc_tenant(subject)
    if named != tenant:
        return f"the request's tenant is not the one its subject names ({named})"
    return None
