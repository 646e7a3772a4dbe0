"""Who is asking: the actor an operator action is audited as.

In Azure the Functions host has already authenticated the request before the function runs, either
with App Service authentication (Easy Auth), which passes the signed-in principal in the
``X-MS-CLIENT-PRINCIPAL-NAME`` and ``X-MS-CLIENT-PRINCIPAL`` headers, or with a function or host key,
sent as ``x-functions-key`` or ``?code=``. The host does not tell the function *which* named key
matched, and the key itself is a secret that must not be stored, so the actor records a short SHA-256
prefix of the key: whoever holds the keys can tell which one it was (hash each key and compare), and
the audit trail leaks nothing usable. When both are present both are recorded. With neither (the local
runner with no keys configured) the actor is ``local``.

Easy Auth removes client-sent ``X-MS-CLIENT-PRINCIPAL*`` headers only when it is enabled; without it
a caller holding a key could send any name, which is why the key's hash is recorded alongside.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping

KEY_HASH_CHARS = 12
_NAME_CLAIMS = (
    "name",
    "preferred_username",
    "upn",
    "email",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name",
)


def key_fingerprint(key: str) -> str:
    """The part of a key's SHA-256 that the audit trail keeps."""
    return hashlib.sha256(key.encode()).hexdigest()[:KEY_HASH_CHARS]


def _principal_from_token(encoded: str) -> str | None:
    """A name from the base64 JSON of ``X-MS-CLIENT-PRINCIPAL`` (its claims), if one is there."""
    try:
        data = json.loads(base64.b64decode(encoded + "=" * (-len(encoded) % 4)))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    claims = data.get("claims")
    if isinstance(claims, list):
        for wanted in _NAME_CLAIMS:
            for claim in claims:
                if isinstance(claim, dict) and claim.get("typ") == wanted and claim.get("val"):
                    return str(claim["val"])
    return str(data["userDetails"]) if data.get("userDetails") else None


def actor_of(headers: Mapping[str, str], params: Mapping[str, str]) -> str:
    """``user:<name>``, ``key:<sha256 prefix>``, both, or ``local``. Header names in lower case."""
    name = headers.get("x-ms-client-principal-name") or None
    if name is None and headers.get("x-ms-client-principal"):
        name = _principal_from_token(headers["x-ms-client-principal"])
    key = headers.get("x-functions-key") or params.get("code")
    parts = [f"user:{name[:256]}"] if name else []
    if key:
        parts.append(f"key:{key_fingerprint(key)}")
    return " ".join(parts) or "local"
