"""The HTTP host in process (its ASGI app, no server): route templates, precedence, results and errors.

Requests go through azure-functions-runtime as in a worker: each test's app is indexed by the runtime from
a ``function_app.py`` that re-exports it (:mod:`tests.devhost.inline_app`).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import azure.functions as func
import httpx
import pytest

from devhost.functions import FunctionSpec, describe, describe_bindings
from devhost.http_host import (
    INTERNAL_ERROR_MESSAGE,
    MAX_REQUEST_BODY_BYTES,
    HostKeys,
    HttpHost,
    compile_route,
)
from devhost.language_worker import AppLoadError, LanguageWorker
from tests.devhost import inline_app


def specs_of(app: func.FunctionApp) -> list[FunctionSpec]:
    """The app's HTTP functions as the host describes them, from their declared bindings."""
    return [
        describe_bindings(str(f.get_function_name()), "", [json.loads(b) for b in f.get_raw_bindings()])
        for f in app.get_functions()
    ]


class Client:
    """Requests straight into the host's ASGI app (no server), each in its own event loop."""

    def __init__(self, host: HttpHost) -> None:
        self._host = host

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self._host.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
                return await client.request(method, url, **kwargs)

        return asyncio.run(send())

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("PUT", url, **kwargs)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Client]]:
    """A client for an app's HTTP functions under the given route prefix, invoked by the runtime."""
    workers: list[LanguageWorker] = []

    def make(app: func.FunctionApp, prefix: str = "api", keys: HostKeys | None = None) -> Client:
        app_dir = tmp_path / f"app{len(workers)}"
        inline_app.write_app(app_dir, app)
        worker = LanguageWorker(app_dir)
        workers.append(worker)
        specs = [describe(metadata) for metadata in asyncio.run(worker.start())]
        return Client(HttpHost(specs, prefix, worker, keys))

    yield make
    for worker in workers:
        worker.stop()


def echo_route_params(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(repr(sorted(req.route_params.items())))


def test_route_templates_compile_to_the_expected_matches() -> None:
    app = func.FunctionApp()
    app.route(route="orders/{id:int}/lines/{line?}")(echo_route_params)
    (spec,) = specs_of(app)
    route = compile_route(spec)

    assert route.match("/orders/5/lines") == {"id": "5"}
    assert route.match("/orders/5/lines/7") == {"id": "5", "line": "7"}
    assert route.match("/ORDERS/5/LINES/") == {"id": "5"}
    assert route.match("/orders/x/lines") is None
    assert route.match("/orders/5") is None


@pytest.mark.parametrize(
    ("template", "path", "expected"),
    [
        ("files/{*rest}", "/files/a/b/c.txt", {"rest": "a/b/c.txt"}),
        ("files/{*rest}", "/files", {}),
        ("greet/{name=world}", "/greet", {"name": "world"}),
        ("greet/{name=world}", "/greet/ann", {"name": "ann"}),
        ("img/{name}.{ext}", "/img/cat.png", {"name": "cat", "ext": "png"}),
        ("c/{code:alpha}", "/c/abc", {"code": "abc"}),
        ("c/{code:alpha}", "/c/ab1", None),
        (
            "g/{id:guid}",
            "/g/3f2504e0-4f89-11d3-9a0c-0305e82c3301",
            {"id": "3f2504e0-4f89-11d3-9a0c-0305e82c3301"},
        ),
        ("m/{n:minlength(2)}", "/m/x", {"n": "x"}),  # unchecked constraints accept the value
        ("", "", {}),
    ],
)
def test_route_template_forms(template: str, path: str, expected: dict[str, str] | None) -> None:
    app = func.FunctionApp()
    app.route(route=template)(echo_route_params)
    (spec,) = specs_of(app)

    assert compile_route(spec).match(path) == expected


def test_prefix_precedence_and_method_handling(serve: Callable[..., Client]) -> None:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

    @app.route(route="things/{name}", methods=["GET"])
    def by_name(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse(f"name={req.route_params['name']}")

    @app.route(route="things/special", methods=["GET"])
    def special(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse("special")

    @app.route(route="things/{id:int}", methods=["GET"])
    def by_id(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse(f"id={req.route_params['id']}")

    @app.route(route="things", methods=["PUT"])
    def put_thing(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse(req.get_body(), status_code=201, mimetype="application/octet-stream")

    client = serve(app, prefix="v1")

    assert client.get("/v1/things/special").text == "special"  # literal beats parameter
    assert client.get("/v1/things/42").text == "id=42"  # constrained beats plain parameter
    assert client.get("/v1/things/bob").text == "name=bob"
    put = client.put("/v1/things", content=b"\x00\x01")
    assert (put.status_code, put.content, put.headers["content-type"]) == (
        201,
        b"\x00\x01",
        "application/octet-stream",
    )
    wrong = client.post("/v1/things/bob")
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "GET"
    assert client.get("/api/things/bob").status_code == 404
    assert client.get("/admin/host/status").json()["state"] == "Running"


def test_any_path_gets_the_hosts_json_answer(serve: Callable[..., Client]) -> None:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

    @app.route(route="things/{name}")
    def thing(req: func.HttpRequest) -> str:
        return req.route_params["name"]

    client = serve(app)

    for path in ("/api/nothing/here", "/api/things/a/b%0Ac", "/%0A"):
        missing = client.get(path)
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, "NotFound"), path
    assert client.get("/api/things/a%0Ab").text == "a\nb"


def test_empty_route_prefix(serve: Callable[..., Client]) -> None:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

    @app.route(route="hello")
    def hello(req: func.HttpRequest) -> str:
        return "hi"

    client = serve(app, prefix="")

    assert client.get("/hello").text == "hi"
    assert client.get("/api/hello").status_code == 404


def test_results_headers_and_failures(serve: Callable[..., Client]) -> None:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

    @app.route(route="cookies")
    def cookies(req: func.HttpRequest) -> func.HttpResponse:
        response = func.HttpResponse("<p>hi</p>", mimetype="text/html", charset="latin-1")
        response.headers.add("Set-Cookie", "a=1")
        response.headers.add("Set-Cookie", "b=2")
        return response

    @app.route(route="custom-type")
    def custom_type(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse("{}", headers={"Content-Type": "application/problem+json"})

    @app.route(route="wrong-type")
    def wrong_type(req: func.HttpRequest):  # type: ignore[no-untyped-def]  # the runtime refuses `-> Any`
        return {"not": "allowed"}

    @app.route(route="fails")
    async def fails(req: func.HttpRequest) -> func.HttpResponse:
        await asyncio.sleep(0)
        raise KeyError("missing")

    client = serve(app)

    html = client.get("/api/cookies")
    assert html.headers["content-type"] == "text/html; charset=latin-1"
    assert html.headers.get_list("set-cookie") == ["a=1", "b=2"]
    assert client.get("/api/custom-type").headers["content-type"] == "application/problem+json"
    wrong = client.get("/api/wrong-type")
    assert wrong.status_code == 500
    assert wrong.json()["error"] == {"code": "InternalError", "message": INTERNAL_ERROR_MESSAGE}
    failed = client.get("/api/fails")
    assert failed.status_code == 500
    # The exception is the log's, never the client's: its type and text would tell how the app is built.
    assert failed.json()["error"] == {"code": "InternalError", "message": INTERNAL_ERROR_MESSAGE}


def test_an_http_function_annotated_to_return_none_does_not_load_as_in_azure(
    serve: Callable[..., Client],
) -> None:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

    @app.route(route="nothing")
    def nothing(req: func.HttpRequest) -> None:
        return None

    with pytest.raises(AppLoadError, match='return annotation "NoneType" does not match binding type "http"'):
        serve(app)


def test_request_details_reach_the_function(serve: Callable[..., Client]) -> None:
    seen: dict[str, Any] = {}
    app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

    @app.route(route="inspect/{who}", methods=["POST"])
    def inspect(req: func.HttpRequest) -> func.HttpResponse:
        seen.update(
            method=req.method,
            url=req.url,
            params=dict(req.params),
            route=dict(req.route_params),
            json=req.get_json(),
            agent=req.headers.get("X-Agent"),
        )
        return func.HttpResponse("ok")

    client = serve(app)
    response = client.post("/api/inspect/a%20b?tag=1&tag=2", json={"n": 1}, headers={"X-Agent": "tests"})

    assert response.status_code == 200
    assert seen == {
        "method": "POST",
        "url": "http://testserver/api/inspect/a%20b?tag=1&tag=2",
        "params": {"tag": "1,2"},
        "route": {"who": "a b"},
        "json": {"n": 1},
        "agent": "tests",
    }


def leveled_app() -> func.FunctionApp:
    """One function per auth level; the app's default level is function."""
    app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)

    @app.route(route="open", auth_level=func.AuthLevel.ANONYMOUS)
    def open_route(req: func.HttpRequest) -> str:
        return "open"

    @app.route(route="keyed")
    def keyed(req: func.HttpRequest) -> str:
        return "keyed"

    @app.route(route="control", auth_level=func.AuthLevel.ADMIN)
    def control(req: func.HttpRequest) -> str:
        return "control"

    return app


def test_keys_are_not_checked_unless_given(serve: Callable[..., Client]) -> None:
    client = serve(leveled_app())

    assert [client.get(f"/api/{name}").status_code for name in ("open", "keyed", "control")] == [200] * 3


def test_given_keys_are_checked_per_auth_level(serve: Callable[..., Client]) -> None:
    client = serve(leveled_app(), keys=HostKeys(function_key="f-key", master_key="m-key"))

    def status(path: str, key: str | None = None, *, in_query: bool = False) -> int:
        if key is None:
            return client.get(path).status_code
        if in_query:
            return client.get(path, params={"code": key}).status_code
        return client.get(path, headers={"x-functions-key": key}).status_code

    assert status("/api/open") == 200
    assert [status("/api/keyed"), status("/api/keyed", "wrong"), status("/api/keyed", "f-key")] == [
        401,
        401,
        200,
    ]
    assert status("/api/keyed", "f-key", in_query=True) == 200
    assert status("/api/keyed", "m-key") == 200, "the master key opens function-level routes too"
    assert [status("/api/control"), status("/api/control", "f-key"), status("/api/control", "m-key")] == [
        401,
        401,
        200,
    ]
    assert status("/api/control", "m-key", in_query=True) == 200
    assert status("/admin/host/status", "f-key") == 401
    assert status("/admin/host/status", "m-key") == 200
    refused = client.get("/api/keyed")
    assert refused.json()["error"]["code"] == "Unauthorized"
    assert client.get("/api/missing").status_code == 404, "an unknown route is still a 404"


def test_without_a_master_key_admin_routes_are_closed(serve: Callable[..., Client]) -> None:
    client = serve(leveled_app(), keys=HostKeys(function_key="f-key"))

    assert client.get("/api/keyed", headers={"x-functions-key": "f-key"}).status_code == 200
    assert client.get("/api/control", headers={"x-functions-key": "f-key"}).status_code == 401


class Chunks:
    """A request body sent in chunks of 64 KiB as the host asks for them, counting what it asked for."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.sent = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.sent < self.size:
            chunk = min(64 * 1024, self.size - self.sent)
            self.sent += chunk
            yield b"x" * chunk


def sized_app() -> func.FunctionApp:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)

    @app.route(route="size", methods=["POST"])
    def size(req: func.HttpRequest) -> str:
        return str(len(req.get_body()))

    return app


def test_credentials_are_checked_before_a_byte_of_the_body_is_read(serve: Callable[..., Client]) -> None:
    client = serve(sized_app(), keys=HostKeys(function_key="f-key"))
    streamed = Chunks(10 * MAX_REQUEST_BODY_BYTES)

    refused = client.post("/api/size", content=streamed)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "Unauthorized"
    assert streamed.sent == 0
    # Refused for its credential, not its size: the size is the host's to judge only once it is called.
    declared = client.post("/api/size", content=b"x" * (MAX_REQUEST_BODY_BYTES + 1))
    assert declared.status_code == 401


def test_a_body_over_the_cap_is_413_and_read_no_further(serve: Callable[..., Client]) -> None:
    client = serve(sized_app(), keys=HostKeys(function_key="f-key"))
    key = {"x-functions-key": "f-key"}

    at_the_cap = client.post("/api/size", content=b"x" * MAX_REQUEST_BODY_BYTES, headers=key)
    assert at_the_cap.status_code == 200 and at_the_cap.text == str(MAX_REQUEST_BODY_BYTES)
    over = client.post("/api/size", content=b"x" * (MAX_REQUEST_BODY_BYTES + 1), headers=key)
    assert over.status_code == 413 and over.headers["connection"] == "close"
    assert over.json() == {
        "error": {"code": "PayloadTooLarge", "message": f"the body is over {MAX_REQUEST_BODY_BYTES} bytes"}
    }
    # No Content-Length (chunked): read until it passes the cap, then no further.
    streamed = Chunks(100 * MAX_REQUEST_BODY_BYTES)
    refused = client.post("/api/size", content=streamed, headers=key)
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "PayloadTooLarge"
    assert MAX_REQUEST_BODY_BYTES < streamed.sent <= MAX_REQUEST_BODY_BYTES + 64 * 1024
    small = Chunks(3)
    assert client.post("/api/size", content=small, headers=key).text == "3"


def test_accepted_connections_send_without_delay() -> None:
    # Without TCP_NODELAY a response written as headers, then body, waits for the client's delayed ACK
    # (about 40 ms) on every request after a connection's first. asyncio sets it on accepted sockets
    # only when the listening socket names TCP as its protocol, which bind() must do.
    host = HttpHost([], "api", LanguageWorker(Path(".")))
    listening = host.bind("127.0.0.1", 0)
    port = listening.getsockname()[1]

    async def accepted_nodelay() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=listening)
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            value = await asyncio.wait_for(accepted, timeout=5)
            writer.close()
            return value
        finally:
            server.close()

    assert asyncio.run(accepted_nodelay()) != 0


def test_a_path_with_an_encoded_line_break_gets_the_hosts_own_404(serve: Callable[..., Client]) -> None:
    client = serve(leveled_app())
    missing = client.get("/api/things%0Aelse")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NotFound"
