"""HTTP triggers: an ASGI app served by uvicorn, routing the way the Functions host does.

Routes live under the route prefix (``api`` unless host.json sets ``extensions.http.routePrefix``).
Templates are ASP.NET-style: ``{name}``, optional ``{name?}``, defaults ``{name=value}``, catch-all
``{*rest}`` and constraints ``{id:int}`` (int, long, alpha, bool, guid, double, float, decimal are checked;
others are accepted without checking). Matching is case-insensitive, and when several routes match, the
more specific one wins (literal before constrained before plain parameter before optional before
catch-all).

A matched request goes to ``azure-functions-runtime`` as the Functions host sends it: an ``RpcHttp`` with
the method, the URL as sent, the headers, the query, the route's values (``params``) and the body as
bytes (the runtime asks for raw bytes); the response the runtime returns (status, headers, cookies,
body) is written back as it is. A function that raises is a 500 whose body says only that: the exception
goes to the log, never to the client.

The body is read last, after the route, the method and the host's own credentials (a key, a bearer
token) have been checked, and only up to :data:`MAX_REQUEST_BODY_BYTES`: a longer one is a 413 with
the rest left unread. A role the app checks itself (``orders.access``) is checked in the function, after
the body arrived, as in Azure; the cap bounds what a caller without a credential can make the host read.

Auth levels are not enforced by default, as with Core Tools locally. Given keys (:class:`HostKeys`), the
host checks them as the Functions host does: the key comes in the ``x-functions-key`` header or the
``code`` query parameter; an ``anonymous`` function is open, a ``function`` one takes the function key or
the master key, an ``admin`` one (and ``/admin/...``) only the master key; anything else is a 401.

Given a :class:`PlatformAuth`, it also plays App Service authentication in front of the functions: it
removes every ``X-MS-CLIENT-PRINCIPAL*`` header a client sent (unless told to trust them, so that tests
can act as any principal) and sets the platform's own for a signed-in identity. Here an identity signs
in with its key: as a bearer token (``Authorization: Bearer <key>``, where Azure takes an Entra ID
access token; one that signs no one in is a 401, as the platform answers an invalid token), in
``x-functions-key``, or through the sign-in page at ``/.auth/login/aad``, which sets a session cookie as
the platform's does. The key never reaches the functions.
"""

from __future__ import annotations

import base64
import hmac
import html
import json
import logging
import re
import secrets
import socket
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import format_datetime
from urllib.parse import parse_qs, quote, urlsplit

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.types import Receive, Scope, Send

from devhost.errors import ConfigurationError
from devhost.functions import FunctionSpec
from devhost.language_worker import InvocationFailed, LanguageWorker
from devhost.protos import function_rpc_pb2 as protos

log = logging.getLogger("devhost.http")

ALL_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE", "CONNECT")
_TOKEN = re.compile(r"\{([^{}]*)\}")
_CONSTRAINT_PATTERNS = {
    "int": r"-?\d+",
    "long": r"-?\d+",
    "alpha": r"[A-Za-z]+",
    "bool": r"(?:true|false)",
    "guid": r"\{?[0-9A-Fa-f]{8}-?(?:[0-9A-Fa-f]{4}-?){3}[0-9A-Fa-f]{12}\}?",
    "double": r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?",
    "float": r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?",
    "decimal": r"-?\d+(?:\.\d+)?",
}
KEY_HEADER = "x-functions-key"
KEY_QUERY_PARAMETER = "code"
# The largest request body the host reads. The Functions host in Azure takes up to 100 MB, far more than
# any function here needs: the orders API refuses bodies over 64 KiB itself (orders.api.MAX_BODY_BYTES),
# the hosted simulators theirs over 1 MiB, and an order's body is a few hundred bytes. 1 MiB bounds what
# one request can make the host hold, and is above the API's own limit, so the API, with its own error,
# answers the bodies in between.
MAX_REQUEST_BODY_BYTES = 1024 * 1024
# A failed function's answer: the exception's type and text are for the log, not for the client.
INTERNAL_ERROR_MESSAGE = "the function failed; the host's log has the details"
# Segment precedence as ASP.NET orders routes: lower sorts first.
_LITERAL, _CONSTRAINED, _PARAMETER, _OPTIONAL, _CATCH_ALL = 1, 2, 3, 4, 5


@dataclass(frozen=True)
class _Parameter:
    group: str
    name: str
    default: str | None


@dataclass(frozen=True)
class CompiledRoute:
    """One HTTP function's route template compiled to a regular expression over the path after the prefix."""

    spec: FunctionSpec
    template: str
    regex: re.Pattern[str]
    parameters: tuple[_Parameter, ...]
    methods: frozenset[str] | None
    precedence: tuple[int, ...]

    def match(self, path: str) -> dict[str, str] | None:
        """The route parameters if ``path`` (leading ``/``, no prefix) matches, else None."""
        found = self.regex.match(path)
        if found is None:
            return None
        values: dict[str, str] = {}
        for parameter in self.parameters:
            value = found.group(parameter.group)
            if value is None or value == "":
                value = parameter.default
            if value is not None:
                values[parameter.name] = value
        return values

    def allows(self, method: str) -> bool:
        """True if the function accepts this HTTP method."""
        return self.methods is None or method in self.methods


@dataclass(frozen=True)
class HostKeys:
    """The keys the host checks. With neither set nothing is checked (Core Tools' local default)."""

    function_key: str | None = None
    master_key: str | None = None

    @property
    def enforced(self) -> bool:
        """True if requests are checked at all."""
        return bool(self.function_key or self.master_key)

    def allows(self, auth_level: str | None, supplied: str | None) -> bool:
        """True if a request carrying ``supplied`` may call a function of ``auth_level``.

        A function that names no level has the platform's default, ``function``. Levels this host does
        not issue keys for (``system``, ``user``) take the master key only, as it opens everything.
        """
        level = (auth_level or "function").lower()
        if not self.enforced or level == "anonymous":
            return True
        if level == "function" and _same(supplied, self.function_key):
            return True
        return _same(supplied, self.master_key)


@dataclass(frozen=True)
class Identity:
    """Someone who can sign in to the emulated platform: a name, an object id and app roles."""

    name: str
    object_id: str
    app_roles: tuple[str, ...]

    def headers(self) -> dict[str, str]:
        """The principal headers App Service authentication sets for a signed-in Entra ID principal."""
        claims = [{"typ": "roles", "val": role} for role in self.app_roles]
        claims += [
            {"typ": "name", "val": self.name},
            {"typ": "http://schemas.microsoft.com/identity/claims/objectidentifier", "val": self.object_id},
        ]
        body = {"auth_typ": "aad", "claims": claims, "name_typ": "name", "role_typ": "roles"}
        return {
            "x-ms-client-principal": base64.b64encode(json.dumps(body).encode()).decode(),
            "x-ms-client-principal-name": self.name,
            "x-ms-client-principal-id": self.object_id,
            "x-ms-client-principal-idp": "aad",
        }


PRINCIPAL_HEADER_PREFIX = "x-ms-client-principal"
SESSION_COOKIE = "AppServiceAuthSession"
LOGIN_PATH = "/.auth/login/aad"
LOGOUT_PATH = "/.auth/logout"


@dataclass
class PlatformAuth:
    """App Service authentication as this host plays it: ``identities`` by the key that signs each in.

    With ``trust_principal_headers`` a client's own principal headers pass through, as if the platform
    had set them (for tests acting as any principal); without it they are removed.
    """

    identities: Mapping[str, Identity] = field(default_factory=dict)
    trust_principal_headers: bool = False
    _sessions: dict[str, Identity] = field(default_factory=dict, repr=False)

    def identity_for_key(self, supplied: str | None) -> Identity | None:
        """The identity ``supplied`` signs in, if any (compared in constant time)."""
        found = None
        for key, identity in self.identities.items():
            if _same(supplied, key):
                found = identity
        return found

    def start_session(self, identity: Identity) -> str:
        """A new session for ``identity``: the cookie's value."""
        token = secrets.token_urlsafe(32)
        self._sessions[token] = identity
        return token

    def session(self, token: str | None) -> Identity | None:
        """The identity of a session cookie, if it is one of ours."""
        return self._sessions.get(token) if token else None

    def end_session(self, token: str | None) -> None:
        """Forget a session (sign-out)."""
        if token:
            self._sessions.pop(token, None)


def _same(supplied: str | None, key: str | None) -> bool:
    # Constant-time comparison: the time taken must not tell how much of a guessed key was right.
    return bool(supplied and key) and hmac.compare_digest(str(supplied).encode(), str(key).encode())


def _bearer(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer`` header, if there is one."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def _supplied_key(request: Request) -> str | None:
    """The key a request carries: the header first, then the query parameter (as the Functions host)."""
    return request.headers.get(KEY_HEADER) or request.query_params.get(KEY_QUERY_PARAMETER)


def _parse_token(body: str, template: str) -> tuple[str, str, str | None, bool, bool]:
    """Split ``{...}`` into (name, value pattern, default, optional, catch_all)."""
    text = body.strip()
    catch_all = text.startswith("*")
    text = text.lstrip("*")
    optional = text.endswith("?")
    text = text.removesuffix("?")
    default: str | None = None
    if "=" in text:
        text, default = text.split("=", 1)
        optional = True
    name, _, constraints = text.partition(":")
    name = name.strip()
    if not name or not re.fullmatch(r"[A-Za-z_][\w.-]*", name):
        raise ConfigurationError(f"route template {template!r}: bad parameter {{{body}}}")
    pattern = ".*" if catch_all else "[^/]+"
    for constraint in filter(None, constraints.split(":")):
        known = _CONSTRAINT_PATTERNS.get(constraint.split("(", 1)[0].strip().lower())
        if known is not None and not catch_all:
            pattern = known
        elif known is None:
            log.debug("route %r: constraint %r is not checked locally", template, constraint)
    return name, pattern, default, optional, catch_all


def compile_route(spec: FunctionSpec) -> CompiledRoute:
    """Compile the function's route template (its function name if it sets none)."""
    template = (spec.route if spec.route is not None else spec.name).strip().strip("/")
    regex = ""
    parameters: list[_Parameter] = []
    precedence: list[int] = []
    seen: set[str] = set()
    for segment in [s for s in template.split("/") if s] if template else []:
        tokens = list(_TOKEN.finditer(segment))
        if not tokens:
            regex += "/" + re.escape(segment)
            precedence.append(_LITERAL)
            continue
        pieces: list[str] = []
        position = 0
        rank = _LITERAL
        whole_optional = False
        for token in tokens:
            pieces.append(re.escape(segment[position : token.start()]))
            name, pattern, default, optional, catch_all = _parse_token(token.group(1), template)
            if name.lower() in seen:
                raise ConfigurationError(f"route template {template!r}: parameter {name!r} appears twice")
            seen.add(name.lower())
            group = f"p{len(parameters)}"
            parameters.append(_Parameter(group, name, default))
            alone = len(tokens) == 1 and token.group(0) == segment
            if alone and (optional or catch_all):
                whole_optional = True
            pieces.append(f"(?P<{group}>{pattern})")
            position = token.end()
            if catch_all:
                rank = max(rank, _CATCH_ALL)
            elif optional:
                rank = max(rank, _OPTIONAL)
            elif pattern != "[^/]+":
                rank = max(rank, _CONSTRAINED)
            else:
                rank = max(rank, _PARAMETER)
        pieces.append(re.escape(segment[position:]))
        body = "".join(pieces)
        # An optional or catch-all segment may be left out together with its slash.
        regex += f"(?:/{body})?" if whole_optional else f"/{body}"
        precedence.append(rank)
    methods = frozenset(spec.methods) if spec.methods else None
    return CompiledRoute(
        spec=spec,
        template=template,
        regex=re.compile(f"^{regex}/?$", re.IGNORECASE),
        parameters=tuple(parameters),
        methods=methods,
        precedence=tuple(precedence),
    )


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def _unauthorized(path: str) -> JSONResponse:
    # The Functions host answers 401 with no body; here the body says why, in the product's error shape.
    return _error(401, "Unauthorized", f"{path} needs a valid key in {KEY_HEADER} or ?{KEY_QUERY_PARAMETER}=")


def _too_large() -> JSONResponse:
    # Connection: close, since the rest of the body is left unread: the connection cannot carry another
    # request, and closing it spares reading what may be a long stream.
    return _error(
        413,
        "PayloadTooLarge",
        f"the body is over {MAX_REQUEST_BODY_BYTES} bytes",
        headers={"Connection": "close"},
    )


async def read_body(request: Request, limit: int = MAX_REQUEST_BODY_BYTES) -> bytes | None:
    """The request's body, or None when it is over ``limit`` bytes.

    A declared ``Content-Length`` over the limit is refused before a byte is read; otherwise the body is
    read until it ends or passes the limit, and no more than ``limit`` bytes are kept.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _request_url(request: Request) -> str:
    """The URL as the client sent it: Starlette's ``request.url`` carries the decoded path."""
    scope = request.scope
    raw_path = scope.get("raw_path") or quote(scope["path"]).encode("ascii")
    query = scope.get("query_string") or b""
    url = f"{request.url.scheme}://{request.url.netloc}{raw_path.decode('latin-1')}"
    return f"{url}?{query.decode('latin-1')}" if query else url


def _join_multi(items: Iterable[tuple[str, str]], separator: str) -> dict[str, str]:
    """Collapse repeated keys the way ASP.NET renders StringValues."""
    joined: dict[str, str] = {}
    for key, value in items:
        joined[key] = f"{joined[key]}{separator}{value}" if key in joined else value
    return joined


def _body_bytes(data: protos.TypedData) -> bytes:
    kind = data.WhichOneof("data")
    if kind is None:
        return b""
    if kind in ("bytes", "stream"):
        return bytes(getattr(data, kind))
    if kind in ("string", "json"):
        return str(getattr(data, kind)).encode("utf-8")
    if kind in ("int", "double"):
        return str(getattr(data, kind)).encode("ascii")
    raise TypeError(f"an HTTP response body cannot be {kind}")


_SAME_SITE = {
    protos.RpcHttpCookie.SameSite.Lax: "Lax",
    protos.RpcHttpCookie.SameSite.Strict: "Strict",
    protos.RpcHttpCookie.SameSite.ExplicitNone: "None",
}


def _set_cookie(cookie: protos.RpcHttpCookie) -> str:
    """A Set-Cookie value, as the host writes each cookie the function set."""
    parts = [f"{cookie.name}={cookie.value}"]
    # The worker sends every attribute of a parsed cookie, unset ones as empty strings.
    if cookie.domain.value:
        parts.append(f"Domain={cookie.domain.value}")
    if cookie.path.value:
        parts.append(f"Path={cookie.path.value}")
    if cookie.HasField("expires"):
        expires = cookie.expires.value.ToDatetime(tzinfo=UTC)
        parts.append(f"Expires={format_datetime(expires, usegmt=True)}")
    if cookie.HasField("max_age"):
        parts.append(f"Max-Age={int(cookie.max_age.value)}")
    if cookie.HasField("secure") and cookie.secure.value:
        parts.append("Secure")
    if cookie.HasField("http_only") and cookie.http_only.value:
        parts.append("HttpOnly")
    if cookie.same_site in _SAME_SITE:
        parts.append(f"SameSite={_SAME_SITE[cookie.same_site]}")
    return "; ".join(parts)


def to_starlette_response(value: protos.TypedData) -> Response:
    """Write an HTTP function's return value (the runtime's TypedData) as the host does.

    An ``http`` value carries status, headers, cookies and body; any other value (a function that
    returned a ``str``) is a 200 with that body.
    """
    if value.WhichOneof("data") != "http":
        if value.WhichOneof("data") is None:
            return Response(status_code=204)
        return Response(content=_body_bytes(value), status_code=200, media_type="text/plain; charset=utf-8")
    http = value.http
    response = Response(content=_body_bytes(http.body), status_code=int(http.status_code or 200))
    for name, header in http.headers.items():
        if name.lower() in ("content-length", "transfer-encoding"):
            continue  # the server frames the body itself
        response.raw_headers.append((name.lower().encode("latin-1"), header.encode("latin-1")))
    for cookie in http.cookies:
        response.raw_headers.append((b"set-cookie", _set_cookie(cookie).encode("latin-1")))
    return response


class HttpHost:
    """Serves the app's HTTP-triggered functions."""

    def __init__(
        self,
        specs: Sequence[FunctionSpec],
        route_prefix: str,
        worker: LanguageWorker,
        keys: HostKeys | None = None,
        platform: PlatformAuth | None = None,
    ) -> None:
        self._worker = worker
        self.keys = keys or HostKeys()
        self.platform = platform
        self._prefix = route_prefix.strip().strip("/")
        routes = [compile_route(spec) for spec in specs]
        # Stable sort: among equally specific routes, declaration order decides.
        self.routes: list[CompiledRoute] = sorted(routes, key=lambda route: route.precedence)
        # Every request goes to _dispatch, whatever its path holds: a route pattern would not match a
        # percent-encoded line break, and the host must answer that with its own 404 like any other path.
        self.app = Starlette()
        self.app.router.default = self._asgi
        self._server: uvicorn.Server | None = None

    async def _asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        response = await self._dispatch(Request(scope, receive))
        await response(scope, receive, send)

    def _strip_prefix(self, path: str) -> str | None:
        if not self._prefix:
            return path
        head = "/" + self._prefix
        if path.lower() == head.lower():
            return ""
        if path.lower().startswith(head.lower() + "/"):
            return path[len(head) :]
        return None

    async def _sign_in(self, request: Request) -> Response:
        """The platform's sign-in and sign-out endpoints, played with keys instead of Entra ID."""
        assert self.platform is not None
        path = request.scope["path"].rstrip("/")
        if path == LOGOUT_PATH:
            self.platform.end_session(request.cookies.get(SESSION_COOKIE))
            response = RedirectResponse("/.auth/login/aad", status_code=302)
            response.delete_cookie(SESSION_COOKIE, path="/")
            return response
        form = await read_body(request) if request.method == "POST" else b""
        if form is None:
            return _too_large()
        fields = parse_qs(form.decode("utf-8", "replace"))
        target = (fields.get("post_login_redirect_uri") or [""])[0] or request.query_params.get(
            "post_login_redirect_uri", "/api/console"
        )
        if not target.startswith("/") or target.startswith("//") or urlsplit(target).netloc:
            target = "/api/console"  # only this host's own paths: no open redirect
        if request.method == "POST":
            identity = self.platform.identity_for_key((fields.get("key") or [""])[0])
            if identity is not None:
                response = RedirectResponse(target, status_code=302)
                response.set_cookie(
                    SESSION_COOKIE, self.platform.start_session(identity), httponly=True, samesite="strict"
                )
                return response
        refused = request.method == "POST"
        page = (
            '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sign in (devhost)</title>'
            '<link rel="icon" href="data:,"></head><body><h1>Sign in</h1>'
            "<p>The devhost plays App Service authentication: sign in with the reader's or the operator's "
            "key from devhost.json.</p>"
            + ("<p role='alert'>That key signs no one in.</p>" if refused else "")
            + f'<form method="post" action="{LOGIN_PATH}"><input type="hidden" '
            f'name="post_login_redirect_uri" value="{html.escape(target)}"><label for="key">Key</label> '
            '<input id="key" name="key" type="password" autocomplete="off" required> '
            '<button type="submit">Sign in</button></form></body></html>'
        )
        return HTMLResponse(page, status_code=401 if refused else 200, headers={"Cache-Control": "no-store"})

    def _platform_headers(self, request: Request) -> list[tuple[str, str]]:
        """The request's headers as the functions get them behind the emulated platform."""
        items = list(request.headers.items())
        if self.platform is None:
            return items
        if not self.platform.trust_principal_headers:
            items = [(k, v) for k, v in items if not k.lower().startswith(PRINCIPAL_HEADER_PREFIX)]
        identity = self.platform.session(request.cookies.get(SESSION_COOKIE))
        keyed = self.platform.identity_for_key(request.headers.get(KEY_HEADER))
        if keyed is not None:
            identity = keyed
            items = [(k, v) for k, v in items if k.lower() != KEY_HEADER]  # the platform consumed it
        bearer = _bearer(request)
        if bearer is not None:
            identity = self.platform.identity_for_key(bearer)
            items = [(k, v) for k, v in items if k.lower() != "authorization"]
        if identity is not None:
            items = [(k, v) for k, v in items if not k.lower().startswith(PRINCIPAL_HEADER_PREFIX)]
            items += list(identity.headers().items())
        return items

    async def _dispatch(self, request: Request) -> Response:
        method = request.method.upper()
        path = request.scope["path"]  # percent-decoded, as route values are
        if self.platform is not None and path.rstrip("/") in (LOGIN_PATH, LOGOUT_PATH):
            return await self._sign_in(request)
        token = _bearer(request) if self.platform is not None else None
        if self.platform is not None and token is not None and self.platform.identity_for_key(token) is None:
            return _error(401, "Unauthorized", "the bearer token signs no one in")
        if path.rstrip("/") == "/admin/host/status" and method == "GET":
            if not self.keys.allows("admin", _supplied_key(request)):
                return _unauthorized(path)
            return JSONResponse({"state": "Running", "host": "devhost"})
        relative = self._strip_prefix(path)
        matches = (
            [] if relative is None else [(r, v) for r in self.routes if (v := r.match(relative)) is not None]
        )
        if not matches:
            return _error(404, "NotFound", f"No function matches {method} {path}")
        chosen = next(((route, values) for route, values in matches if route.allows(method)), None)
        if chosen is None:
            allowed = sorted({m for route, _ in matches for m in (route.methods or ALL_METHODS)})
            return _error(
                405,
                "MethodNotAllowed",
                f"{method} is not allowed on {path}; allowed: {', '.join(allowed)}",
                headers={"Allow": ", ".join(allowed)},
            )
        route, route_params = chosen
        if not self.keys.allows(route.spec.auth_level, _supplied_key(request)):
            return _unauthorized(path)
        # Only now, every check of the host's own made, is the body read, and only up to the cap.
        body = await read_body(request)
        if body is None:
            return _too_large()
        http_request = protos.RpcHttp(
            method=method,
            url=_request_url(request),
            headers=_join_multi(self._platform_headers(request), ", "),
            query=_join_multi(request.query_params.multi_items(), ","),
            params=route_params,
            body=protos.TypedData(bytes=body),
        )
        spec = route.spec
        name = spec.name
        try:
            response = await self._worker.invoke(
                spec.function_id,
                [protos.ParameterBinding(name=spec.arg_name, data=protos.TypedData(http=http_request))],
                reason=f"HTTP {method} {path}",
            )
        except InvocationFailed:  # logged with its traceback by the language worker
            return _error(500, "InternalError", INTERNAL_ERROR_MESSAGE)
        try:
            return to_starlette_response(response.return_value)
        except Exception:
            log.error("Functions.%s: cannot turn its result into an HTTP response", name, exc_info=True)
            return _error(500, "InternalError", INTERNAL_ERROR_MESSAGE)

    def bind(self, host: str, port: int) -> socket.socket:
        """Open the listening socket now, so a busy port fails the start with a clear error.

        The protocol is named (not left 0) because asyncio sets TCP_NODELAY only on accepted sockets whose
        protocol says TCP: without it, a response written in two parts (headers, then body) waits for the
        client's delayed ACK, about 40 ms on every request after a connection's first.
        """
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise ConfigurationError(
                f"cannot listen for HTTP on {host}:{port}: {exc.strerror or exc}"
            ) from exc
        sock.listen(2048)
        sock.setblocking(False)
        return sock

    async def serve(self, sock: socket.socket, graceful_timeout: float) -> None:
        """Serve until :meth:`stop`; in-flight requests get ``graceful_timeout`` seconds to finish."""
        config = uvicorn.Config(
            self.app,
            lifespan="off",
            access_log=False,
            log_config=None,
            timeout_graceful_shutdown=max(1, round(graceful_timeout)),
            http="httptools",  # the C parser: less of the worker's CPU per request than h11
        )
        self._server = _EmbeddedServer(config)
        await self._server.serve(sockets=[sock])

    def stop(self) -> None:
        """Stop accepting connections; requests being served finish (bounded by the graceful timeout)."""
        if self._server is not None:
            self._server.should_exit = True


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handlers: the worker owns SIGTERM/SIGINT and stops every host."""

    def capture_signals(self) -> AbstractContextManager[None]:  # type: ignore[override]
        return nullcontext()
