"""The operator console, ``GET /api/console``: one HTML document for people, over the same HTTP API.

The page is three files in ``orders/static`` (HTML, CSS, JavaScript), put together once at import into
one document with the style and script inline, so a browser makes one request for it and needs nothing
from anywhere else (not even ``/favicon.ico``: its icon is an empty ``data:`` one). Its
Content-Security-Policy allows exactly that: the inline style and script by their SHA-256 (nothing
injected into the page could run), calls to this origin only, no frames, no forms posting elsewhere.
The page holds no secret: the script reads the function key from the page's own ``?code=`` and sends it
as ``x-functions-key`` on each call; with App Service authentication the session cookie goes along too.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"


@dataclass(frozen=True)
class Page:
    """A text/html answer."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _build() -> Page:
    template = (STATIC / "console.html").read_text(encoding="utf-8")
    style = (STATIC / "console.css").read_text(encoding="utf-8")
    script = (STATIC / "console.js").read_text(encoding="utf-8")
    html = template.replace("{{style}}", style).replace("{{script}}", script)
    body = html.encode("utf-8")
    policy = "; ".join(
        (
            "default-src 'none'",
            f"script-src {_sha256(script)}",
            f"style-src {_sha256(style)}",
            "connect-src 'self'",
            "img-src data:",  # the page's empty icon, so the browser asks no one for /favicon.ico
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )
    headers = {
        "Content-Security-Policy": policy,
        # The page is the same for everyone and holds no secret; revalidate so a deployment shows at once.
        "Cache-Control": "private, no-cache",
        "ETag": '"' + hashlib.sha256(body).hexdigest()[:32] + '"',
        "X-Content-Type-Options": "nosniff",
        # The key is in the page's address: never send that address to anyone.
        "Referrer-Policy": "no-referrer",
    }
    return Page(200, body, headers)


PAGE = _build()


def console(headers: Mapping[str, str]) -> Page:
    """``GET /api/console`` (``headers`` with lower-case names): the page, or 304 when the browser's copy
    (``If-None-Match``) is current."""
    tags = {t.strip() for t in headers.get("if-none-match", "").split(",")}
    if PAGE.headers["ETag"] in tags:
        return Page(304, b"", {k: v for k, v in PAGE.headers.items() if k in ("ETag", "Cache-Control")})
    return PAGE
