"""Who is asking, as App Service authentication tells it: the signed-in principal of a request.

With App Service authentication on (Microsoft Entra ID), the platform validates the session or bearer
token before the request reaches the app, removes any ``X-MS-CLIENT-PRINCIPAL*`` header the client sent
and sets its own: ``X-MS-CLIENT-PRINCIPAL`` (base64 JSON of the token's claims, with ``role_typ`` naming
the claim type of roles), ``-NAME`` and ``-ID`` (the object id). Without it nothing removes a client's
headers, so they are read only when :mod:`orders.access` has been told the platform's authentication is
on; this module only parses them.

The audit trail names a principal as ``user:<name> oid:<object id>``: the name for a person reading it,
the object id because names change and the object id is what Entra ID and its sign-in logs key on.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# How much of a name and of an object id the audit trail keeps: together within its actor's 512 characters
# (engine.state.AuditEntry), however long the headers a trusted platform passes on. An object id is a GUID.
MAX_NAME_CHARS = 256
MAX_OBJECT_ID_CHARS = 128
PRINCIPAL_HEADERS = (
    "x-ms-client-principal",
    "x-ms-client-principal-name",
    "x-ms-client-principal-id",
    "x-ms-client-principal-idp",
)
_NAME_CLAIMS = (
    "name",
    "preferred_username",
    "upn",
    "email",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name",
)
_OBJECT_ID_CLAIMS = ("http://schemas.microsoft.com/identity/claims/objectidentifier", "oid")
# Entra ID's v2 tokens carry app roles as "roles"; role_typ in the principal says which type it used.
_ROLE_CLAIMS = ("roles", "http://schemas.microsoft.com/ws/2008/06/identity/claims/role")


@dataclass(frozen=True)
class Principal:
    """A signed-in person or application: its name, object id and app role values."""

    name: str | None
    object_id: str | None
    app_roles: frozenset[str]

    @property
    def actor(self) -> str:
        """How the audit trail names it."""
        parts = [f"user:{(self.name or self.object_id or 'unknown')[:MAX_NAME_CHARS]}"]
        if self.object_id:
            parts.append(f"oid:{self.object_id[:MAX_OBJECT_ID_CHARS]}")
        return " ".join(parts)


def _decoded(encoded: str) -> dict[str, Any] | None:
    try:
        data = json.loads(base64.b64decode(encoded + "=" * (-len(encoded) % 4)))
    except (ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _claims(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = data.get("claims")
    if not isinstance(found, list):
        return []
    return [
        (str(c["typ"]), str(c["val"]))
        for c in found
        if isinstance(c, dict) and c.get("typ") and c.get("val") is not None
    ]


def _first(claims: list[tuple[str, str]], wanted: tuple[str, ...]) -> str | None:
    for kind in wanted:
        for typ, val in claims:
            if typ == kind and val:
                return val
    return None


def principal_of(headers: Mapping[str, str]) -> Principal | None:
    """The principal the platform's headers describe (names in lower case), or None when there is none."""
    encoded = headers.get("x-ms-client-principal")
    data = _decoded(encoded) if encoded else None
    if encoded and data is None:
        return None  # the platform never sends one it cannot decode
    claims = _claims(data or {})
    role_types = {*_ROLE_CLAIMS, *([str(data["role_typ"])] if data and data.get("role_typ") else [])}
    name = headers.get("x-ms-client-principal-name") or _first(claims, _NAME_CLAIMS)
    object_id = headers.get("x-ms-client-principal-id") or _first(claims, _OBJECT_ID_CLAIMS)
    if not (name or object_id):
        return None
    roles = frozenset(val for typ, val in claims if typ in role_types)
    return Principal(name, object_id, roles)
