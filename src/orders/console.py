"""The operator console, ``GET /api/console``: one HTML document for people, over the same HTTP API.

The page is three files in ``orders/static`` (HTML, CSS, JavaScript), put together once at import into
one document with the style and script inline, so a browser makes one request for it and needs nothing
from anywhere else (not even ``/favicon.ico``: its icon is an empty ``data:`` one). Its
Content-Security-Policy allows exactly that: the inline style and script by their SHA-256 (nothing
injected into the page could run), calls to this origin only, no frames, no forms posting elsewhere.
The page holds no secret and no key ever appears in its address: its calls carry what the browser
already has, the session cookie of App Service authentication (same origin). It comes in three variants:
for a caller who may act (operator); for an approver, who may approve or reject a step that waits for an
approval and sees no other action; and for one who may only read, which shows no action buttons. The API
refuses an action to a caller without its role either way. A browser that is not signed in gets
:data:`SIGN_IN`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from engine import operator_actions

STATIC = Path(__file__).resolve().parent / "static"


@dataclass(frozen=True)
class Page:
    """A text/html answer."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


# What <body data-actions> tells the page: every action (operator), approve and reject only (approver),
# none (reader).
ACTS, APPROVES, READS = "on", "approve", "off"


# What the page needs of each operator action (engine.operator_actions): where it is posted and what it
# asks the person for; the page keeps only its buttons' words.
OPERATOR_ACTIONS = escape(
    json.dumps(
        {
            action.name: {
                "onStep": action.on_step,
                "seconds": action.takes_seconds,
                "note": action.note_required,
                "input": action.takes_input,
            }
            for action in operator_actions.ACTIONS
        },
        separators=(",", ":"),
    )
)


def _build(actions: str) -> Page:
    template = (STATIC / "console.html").read_text(encoding="utf-8")
    opening = f'<body data-actions="{actions}" data-operator-actions="{OPERATOR_ACTIONS}">'
    template = template.replace("<body>", opening, 1)
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
        # Nothing about this page (which orders are open) is anyone else's business.
        "Referrer-Policy": "no-referrer",
        # One copy per variant: a cache must not hand an operator's copy to a reader or the reverse.
        "Vary": "Cookie, Authorization, X-Functions-Key",
    }
    return Page(200, body, headers)


PAGE = _build(ACTS)
APPROVER_PAGE = _build(APPROVES)
READ_ONLY_PAGE = _build(READS)
LOGIN_PATH = "/.auth/login/aad?post_login_redirect_uri=/api/console"
SIGN_IN = Page(
    401,
    (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sign in</title>'
        '<link rel="icon" href="data:,"></head><body>'
        f'<p>The console needs you signed in. <a href="{LOGIN_PATH}">Sign in</a>.</p></body></html>'
    ).encode(),
    {
        "Content-Security-Policy": "default-src 'none'; img-src data:; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'",
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
    },
)


def console(headers: Mapping[str, str], can_act: bool = True, can_approve: bool = False) -> Page:
    """``GET /api/console`` (``headers`` with lower-case names): the page for a caller who may act, who
    may approve (and not act), or who may only read; or 304 when the browser's copy (``If-None-Match``)
    is that one and current."""
    page = PAGE if can_act else APPROVER_PAGE if can_approve else READ_ONLY_PAGE
    tags = {t.strip() for t in headers.get("if-none-match", "").split(",")}
    if page.headers["ETag"] in tags:
        return Page(304, b"", {k: v for k, v in page.headers.items() if k in ("ETag", "Cache-Control")})
    return page
