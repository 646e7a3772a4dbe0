"""Entity-group transactions written and read with plain byte operations, checked against the SDK.

- Requests: the same operations go through the SDK's ``TableClient.submit_transaction`` and ours, both to
  a real Azurite; a transport records each request on its way out, and the two must be equal byte for
  byte once the random boundary ids and the dates are replaced by placeholders.
- Answers: every answer Azurite gives, and hand-built answers in Azure's documented format served by a
  real HTTP server, are read by our parser and by azure-core's (the SDK's path) from the same bytes.
- Fallback: answers our parser does not expect are read by azure-core's parser, with one WARNING.
- The private names of azure-data-tables used are still there (upgrading the pinned package needs this
  file to pass).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web
from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError
from azure.core.pipeline.transport import AioHttpTransport
from azure.data.tables import EdmType, EntityProperty, RequestTooLargeError, TableTransactionError, UpdateMode
from azure.data.tables.aio import TableClient, TableServiceClient

from adapters import table_batch
from adapters.table_batch import (
    PRIVATE_CLIENT_ATTRIBUTES,
    PRIVATE_NAMES,
    PartAnswer,
    UnexpectedAnswer,
    parse,
    sdk_parts,
    send,
    submit_transaction,
)
from adapters.table_operations import OperationRequest
from adapters.table_store import TableStateStore
from devhost import azurite
from engine.state import AuditEntry, ProcessState
from tests.adapters.test_table_store import new_record

pytestmark = pytest.mark.anyio

IF_NOT_MODIFIED = {"match_condition": MatchConditions.IfNotModified}
_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_BOUNDARY_ID = re.compile(f"(batch|changeset)_{_UUID}")
_DATE_LINE = re.compile(rb"\r\n(x-ms-date|Date): [^\r\n]*(?=\r\n)")
# Outer headers whose values change from one request to the next whoever sends it.
_VARYING = {"x-ms-date", "date", "authorization", "x-ms-client-request-id"}


@dataclass(frozen=True)
class Sent:
    """A request as it left the client."""

    method: str
    url: str
    headers: list[tuple[str, str]]
    body: bytes

    def normalised(self) -> tuple[str, str, list[tuple[str, str]], bytes]:
        """The request with the boundary ids and the dates (and what signs them) as placeholders."""
        headers = [
            (name, "<varies>" if name.lower() in _VARYING else _BOUNDARY_ID.sub(r"\1_<id>", value))
            for name, value in self.headers
        ]
        body = _BOUNDARY_ID.sub(r"\1_<id>", self.body.decode("latin-1")).encode("latin-1")
        body = _DATE_LINE.sub(lambda m: b"\r\n" + m[1] + b": <date>", body)
        return self.method, self.url, headers, body


class RecordingTransport(AioHttpTransport):
    """azure-core's aiohttp transport that records each request before sending it for real."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[Sent, int]] = []  # each request with the status the service answered

    async def send(self, request: Any, **kwargs: Any) -> Any:
        content = request.content
        body = content.encode() if isinstance(content, str) else bytes(content or b"")
        response = await super().send(request, **kwargs)
        sent = Sent(request.method, request.url, list(request.headers.items()), body)
        self.sent.append((sent, response.status_code))
        return response

    def batches(self) -> list[tuple[Sent, int]]:
        return [(sent, status) for sent, status in self.sent if sent.url.endswith("/$batch")]


@pytest.fixture
async def recorded(
    azurite_connection_string: str, new_table: Callable[[], str]
) -> AsyncIterator[tuple[TableClient, RecordingTransport]]:
    transport = RecordingTransport()
    async with TableServiceClient.from_connection_string(
        azurite_connection_string, transport=transport
    ) as service:
        client = service.get_table_client(new_table())
        yield client, transport


async def _reach(call: Awaitable[Any]) -> None:
    """Send a transaction; a refusal is fine here (the request is what is compared)."""
    with contextlib.suppress(TableTransactionError):
        await call


# ---- 1. requests: byte for byte the SDK's ----------------------------------------------------------
# Values of every type the store writes: the operations are built by adapters.table_operations.
PLAIN: dict[str, Any] = {
    "Text": "plain",
    "Empty": "",
    "Unicode": "caf\u00e9 \u2713 \u00df\u00f8 \u4e2d\u6587 \U0001d11e \U0001f600 \u202e",
    "Quotes": 'a "quoted" \\ back\tslash\r\nline',
    "Long": "x" * 29_990 + "\u00e9\U0001f600end",
    "Int32": 2_147_483_647,
    "Negative": -2_147_483_648,
    "Float": 1.5,
    "WholeFloat": 3.0,
    "Tiny": 1e-300,
    "True": True,
    "False": False,
    "When": datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=UTC),
    "Naive": datetime(2026, 5, 1, 12, 0),
    "Nothing": None,
}
# With the other types an entity may hold: operations holding them are built by the SDK's builder.
WIDE: dict[str, Any] = {
    **PLAIN,
    "Int64": EntityProperty(2**53 + 1, EdmType.INT64),
    "Int64Negative": EntityProperty(-(2**63), EdmType.INT64),
    "Infinite": float("inf"),
    "Bytes": b"\x00\xff\r\nbinary",
    "Id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
}
KEYS = {"PartitionKey": "p", "RowKey": "r\u00e9-\U0001f600 'q"}


async def _created(table: TableClient, entity: dict[str, Any]) -> str:
    metadata = await table.upsert_entity(entity)
    return str(metadata["etag"])


Case = Callable[[TableClient], Awaitable[list[Any]]]


async def _create(table: TableClient, values: dict[str, Any]) -> list[Any]:
    return [("create", {**KEYS, **values})]


async def _upsert_merge(table: TableClient, values: dict[str, Any]) -> list[Any]:
    return [("upsert", {**KEYS, **values}, {"mode": UpdateMode.MERGE})]


async def _upsert_replace(table: TableClient, values: dict[str, Any]) -> list[Any]:
    return [("upsert", {**KEYS, **values}, {"mode": UpdateMode.REPLACE})]


async def _update_merge(table: TableClient, values: dict[str, Any]) -> list[Any]:
    await _created(table, KEYS)
    return [("update", {**KEYS, **values}, {"mode": UpdateMode.MERGE})]


async def _update_replace(table: TableClient, values: dict[str, Any]) -> list[Any]:
    await _created(table, KEYS)
    return [("update", {**KEYS, **values}, {"mode": UpdateMode.REPLACE})]


async def _update_merge_if_match(table: TableClient, values: dict[str, Any]) -> list[Any]:
    etag = await _created(table, KEYS)
    return [("update", {**KEYS, **values}, {"mode": UpdateMode.MERGE, "etag": etag, **IF_NOT_MODIFIED})]


async def _update_replace_if_match(table: TableClient, values: dict[str, Any]) -> list[Any]:
    etag = await _created(table, KEYS)
    return [("update", {**KEYS, **values}, {"mode": UpdateMode.REPLACE, "etag": etag, **IF_NOT_MODIFIED})]


def _with_values(
    name: str, make: Callable[[TableClient, dict[str, Any]], Awaitable[list[Any]]]
) -> dict[str, Case]:
    """The case with the plain values (built here) and with every type (built by the SDK)."""

    async def plain(table: TableClient) -> list[Any]:
        return await make(table, PLAIN)

    async def wide(table: TableClient) -> list[Any]:
        return await make(table, WIDE)

    return {name: plain, f"{name}, every type": wide}


async def _delete(table: TableClient) -> list[Any]:
    await _created(table, KEYS)
    return [("delete", KEYS)]


async def _delete_if_match(table: TableClient) -> list[Any]:
    etag = await _created(table, KEYS)
    return [("delete", KEYS, {"etag": etag, **IF_NOT_MODIFIED})]


async def _several(table: TableClient) -> list[Any]:
    etags = [await _created(table, {"PartitionKey": "p", "RowKey": f"k{i}"}) for i in range(4)]
    return [
        ("create", {"PartitionKey": "p", "RowKey": "new", **PLAIN}),
        ("upsert", {"PartitionKey": "p", "RowKey": "k0", "N": 1}),
        ("update", {"PartitionKey": "p", "RowKey": "k1", "N": 2}, {"etag": etags[1], **IF_NOT_MODIFIED}),
        ("update", {"PartitionKey": "p", "RowKey": "k2", "N": 3}, {"mode": UpdateMode.REPLACE}),
        ("delete", {"PartitionKey": "p", "RowKey": "k3"}, {"etag": etags[3], **IF_NOT_MODIFIED}),
        ("upsert", {"PartitionKey": "p", "RowKey": "k4", "Text": "\u00e9"}, {"mode": UpdateMode.REPLACE}),
    ]


def _store(table: TableClient) -> TableStateStore:
    return TableStateStore(table, table, shards=1)


async def _store_create(table: TableClient) -> list[Any]:
    store, record = _store(table), new_record("o-\u00e9", {"items": [{"sku": "\u00e9" * 40_000}]})
    return [
        ("create", store.codec.input_entity(record)),
        ("create", store.codec.state_entity(record)),
        *(("create", store.codec.step_entity(record.order_id, step)) for step in record.steps),
    ]


async def _store_save(table: TableClient) -> list[Any]:
    store = _store(table)
    _, record = await store.create(new_record("o-1"))
    record.steps[0].result = {"reference": "R-\u00e9", "n": 1}
    entry = AuditEntry(
        at=datetime(2026, 5, 1, tzinfo=UTC),
        actor="operator \u00e9",
        action="retry",
        step="first",
        process_state_before=ProcessState.ERROR,
        process_state_after=ProcessState.PENDING,
        note="n\u00f8te",
    )
    conditional = {"mode": UpdateMode.REPLACE, **IF_NOT_MODIFIED}
    state = store.codec.state_entity(record)
    step = store.codec.step_entity(record.order_id, record.steps[0])
    return [
        ("update", state, {**conditional, "etag": record.etags[state["RowKey"]]}),
        ("update", step, {**conditional, "etag": record.etags[step["RowKey"]]}),
        ("create", store.codec.audit_entity(record.order_id, entry, 0)),
    ]


CASES: dict[str, Case] = {
    **_with_values("create", _create),
    **_with_values("upsert merge", _upsert_merge),
    **_with_values("upsert replace", _upsert_replace),
    **_with_values("update merge", _update_merge),
    **_with_values("update replace", _update_replace),
    **_with_values("update merge if-match", _update_merge_if_match),
    **_with_values("update replace if-match", _update_replace_if_match),
    "delete": _delete,
    "delete if-match": _delete_if_match,
    "several operations": _several,
    "store create": _store_create,
    "store save": _store_save,
}
# The cases whose operations are built by adapters.table_operations; the SDK's builder builds the rest.
BUILT_HERE = {name for name in CASES if not name.endswith("every type")}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_the_request_is_the_sdks_byte_for_byte(
    recorded: tuple[TableClient, RecordingTransport], case: Case
) -> None:
    table, transport = recorded
    operations = await case(table)
    before = len(transport.batches())
    await _reach(table.submit_transaction(operations))
    await _reach(submit_transaction(table, operations))
    [(theirs, their_status), (ours, our_status)] = transport.batches()[before:]
    assert their_status == our_status == 202  # both reached the service and were read by it
    assert ours.normalised() == theirs.normalised()
    assert len(ours.body) == len(theirs.body)  # the placeholders hide no difference in length


@pytest.mark.parametrize("name", CASES.keys())
async def test_the_stores_shapes_are_built_here_and_the_rest_by_the_sdk(
    recorded: tuple[TableClient, RecordingTransport], name: str
) -> None:
    # Were the store's operations to fall back to the SDK's builder, nothing would fail but the CPU.
    table, _ = recorded
    requests = table_batch.operation_requests(table, await CASES[name](table))
    built_here = [isinstance(r, OperationRequest) for r in requests]
    assert built_here == [name in BUILT_HERE] * len(requests)


async def test_the_comparison_sees_a_one_byte_difference(
    recorded: tuple[TableClient, RecordingTransport],
) -> None:
    table, transport = recorded
    await _reach(table.submit_transaction([("upsert", {**KEYS, "N": 1})]))
    await _reach(submit_transaction(table, [("upsert", {**KEYS, "N": 2})]))
    [(theirs, _), (ours, _)] = transport.batches()
    assert ours.normalised() != theirs.normalised()


async def test_bad_operations_fail_as_in_the_sdk(recorded: tuple[TableClient, RecordingTransport]) -> None:
    table, _ = recorded
    bad: list[list[Any]] = [
        [("create", {"PartitionKey": "p", "RowKey": "a"}), ("create", {"PartitionKey": "q", "RowKey": "b"})],
        [("create", {"PartitionKey": "p", "RowKey": "a", "N": 2**40})],
        [("explode", {"PartitionKey": "p", "RowKey": "a"})],
        [("create",)],
    ]
    for operations in bad:
        with pytest.raises(Exception) as sdk:
            await table.submit_transaction(operations)
        with pytest.raises(Exception) as ours:
            await submit_transaction(table, operations)
        assert (type(ours.value), str(ours.value)) == (type(sdk.value), str(sdk.value))


# ---- 2. answers: ours and azure-core's read the same bytes alike ---------------------------------------
def _as_read(parts: list[Any]) -> list[tuple[int, str, list[tuple[str, str]], bytes]]:
    return [(p.status_code, p.reason, list(p.headers.items()), p.content) for p in parts]


def _ours(answers: list[PartAnswer]) -> list[tuple[int, str, list[tuple[str, str]], bytes]]:
    return [(a.status, a.reason, a.headers, a.body) for a in answers]


async def _both_read(table: TableClient, operations: list[Any]) -> tuple[list[Any], list[Any], int]:
    response, requests, batch, changeset = await send(table, operations)
    ours = _ours(parse(response.content, response.headers["Content-Type"]))
    return ours, _as_read(await sdk_parts(response, requests, batch, changeset)), response.status_code


_SERVICE_STAMP = re.compile(r"(RequestId|Time):[^\n]*")  # the service's, different per answer


def _error(exc: BaseException) -> tuple[Any, ...]:
    assert isinstance(exc, HttpResponseError)
    return (
        type(exc),
        exc.status_code,
        exc.reason,
        exc.error_code,  # type: ignore[attr-defined]
        _SERVICE_STAMP.sub(r"\1:<stamp>", exc.message),
        getattr(exc, "index", None),
        exc.response.status_code if exc.response else None,
    )


async def test_a_success_reads_alike_and_returns_the_entities_etags(
    recorded: tuple[TableClient, RecordingTransport],
) -> None:
    table, _ = recorded
    etag = await _created(table, {"PartitionKey": "p", "RowKey": "u"})
    operations = [
        ("create", {"PartitionKey": "p", "RowKey": "a", **WIDE}),
        ("upsert", {"PartitionKey": "p", "RowKey": "b", "Text": "\U0001f600"}),
        ("update", {"PartitionKey": "p", "RowKey": "u", "N": 1}, {"etag": etag, **IF_NOT_MODIFIED}),
        ("delete", {"PartitionKey": "p", "RowKey": "b"}),
    ]
    ours, theirs, status = await _both_read(table, operations[:2])
    assert status == 202 and [a[0] for a in ours] == [201, 204]
    assert ours == theirs
    results = await submit_transaction(table, [operations[2]])
    entity = await table.get_entity("p", "u")
    assert results == [{"etag": entity.metadata["etag"]}]
    ours, theirs, _ = await _both_read(
        table, [("upsert", {"PartitionKey": "p", "RowKey": "c"}), operations[3]]
    )
    assert ours == theirs and [a[0] for a in ours] == [204, 204]
    assert await submit_transaction(table, [("delete", {"PartitionKey": "p", "RowKey": "c"})]) == [{}]


REFUSALS: dict[str, tuple[int, Callable[[str], list[Any]]]] = {
    "412 stale etag": (
        412,
        lambda etag: [
            ("upsert", {"PartitionKey": "p", "RowKey": "x"}),
            ("update", {"PartitionKey": "p", "RowKey": "a", "N": 2}, {"etag": etag, **IF_NOT_MODIFIED}),
        ],
    ),
    "409 exists": (409, lambda _: [("create", {"PartitionKey": "p", "RowKey": "a"})]),
    "404 missing": (404, lambda _: [("update", {"PartitionKey": "p", "RowKey": "missing", "N": 1})]),
    "404 missing delete": (404, lambda _: [("delete", {"PartitionKey": "p", "RowKey": "missing"})]),
    "400 value too large": (
        400,
        lambda _: [("upsert", {"PartitionKey": "p", "RowKey": "b", "T": "x" * 40_000})],
    ),
}


@pytest.mark.parametrize("status, operations", REFUSALS.values(), ids=REFUSALS.keys())
async def test_a_refusal_reads_alike_and_raises_the_sdks_error(
    recorded: tuple[TableClient, RecordingTransport], status: int, operations: Callable[[str], list[Any]]
) -> None:
    table, _ = recorded
    stale = await _created(table, {"PartitionKey": "p", "RowKey": "a"})
    await _created(table, {"PartitionKey": "p", "RowKey": "a", "N": 1})
    ours, theirs, batch_status = await _both_read(table, operations(stale))
    assert batch_status == 202 and ours == theirs and ours[-1][0] == status
    with pytest.raises(TableTransactionError) as sdk:
        await table.submit_transaction(operations(stale))
    with pytest.raises(TableTransactionError) as mine:
        await submit_transaction(table, operations(stale))
    assert _error(mine.value) == _error(sdk.value)
    assert mine.value.status_code == status and mine.value.error_code  # type: ignore[attr-defined]
    assert await table.get_entity("p", "a") is not None and "x" not in [
        e["RowKey"] async for e in table.list_entities()
    ]  # nothing of a refused transaction is applied


async def test_a_missing_table_raises_what_the_sdk_raises(azurite_connection_string: str) -> None:
    operations = [("create", {"PartitionKey": "p", "RowKey": "a"})]
    async with TableClient.from_connection_string(azurite_connection_string, "nosuchtable") as missing:
        with pytest.raises(HttpResponseError) as sdk:
            await missing.submit_transaction(operations)
        with pytest.raises(HttpResponseError) as ours:
            await submit_transaction(missing, operations)
    assert _error(ours.value) == _error(sdk.value)


# ---- hand-built answers from a real HTTP server -----------------------------------------------------
class AnswerServer:
    """A real HTTP server that answers every ``$batch`` with the next queued body and content type."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, bytes, str]] = []
        self.connection = ""

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        status, body, content_type = self.answers.pop(0)
        response = web.Response(status=status, body=body)
        response.headers["Content-Type"] = content_type  # exactly as given (aiohttp would rewrite it)
        return response


@pytest.fixture
async def answering() -> AsyncIterator[tuple[AnswerServer, TableClient]]:
    server = AnswerServer()
    app = web.Application()
    app.router.add_post("/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server.connection = azurite.table_connection_string(port)
    async with TableClient.from_connection_string(server.connection, "answers") as client:
        yield server, client
    await runner.cleanup()


def _etag(n: int) -> str:
    return f"W/\"datetime'2026-05-01T12%3A00%3A0{n}.1234567Z'\""


def _documented(
    parts: int = 3,
    *,
    batch: str = "batchresponse_d3bd9a6c-1f4e-4a2b-9c5e-2b1e4bbf3c71",
    changeset: str = "changesetresponse_7f1f4b2e-6d8c-4e3a-b6f1-0c5d2e9a8b47",
    extra: bytes = b"",
    preamble: bytes = b"",
    epilogue: bytes = b"\r\n",
    refuse: int | None = None,
    after_204: bytes = b"",
) -> bytes:
    """An answer as Azure's documentation shows it: 201 with the entity, then 204s, in one changeset."""
    sections = []
    for i in range(parts):
        if refuse == i:
            http = (
                b"HTTP/1.1 412 Precondition Failed\r\nContent-ID: %d\r\nX-Content-Type-Options: nosniff\r\n"
                b"Cache-Control: no-cache\r\nDataServiceVersion: 3.0;\r\n"
                b"Content-Type: application/json;odata=minimalmetadata;streaming=true;charset=utf-8\r\n\r\n"
                b'{"odata.error":{"code":"UpdateConditionNotSatisfied","message":{"lang":"en-US",'
                b'"value":"%d:The update condition specified in the request was not satisfied.\\n'
                b'RequestId:5a6b\\nTime:2026-05-01T12:00:00.0000000Z"}}}' % (i + 1, i)
            )
        elif i == 0:
            entity = '{"odata.metadata":"m","PartitionKey":"p","RowKey":"\u00e9\U0001f600","N":1}'.encode()
            http = (
                b"HTTP/1.1 201 Created\r\nContent-ID: 1\r\nCache-Control: no-cache\r\n"
                b"Content-Type: application/json;odata=minimalmetadata;streaming=true;charset=utf-8\r\n"
                b"Location: https://acct.table.core.windows.net/t(PartitionKey='p',RowKey='a')\r\n"
                b"DataServiceId: https://acct.table.core.windows.net/t(PartitionKey='p',RowKey='a')\r\n"
                b"ETag: %s\r\n%s\r\n%s" % (_etag(0).encode(), extra, entity)
            )
        else:
            http = (
                b"HTTP/1.1 204 No Content\r\nContent-ID: %d\r\nX-Content-Type-Options: nosniff\r\n"
                b"Cache-Control: no-cache\r\nPreference-Applied: return-no-content\r\n"
                b"DataServiceVersion: 3.0;\r\nETag: %s\r\n%s\r\n%s"
                % (i + 1, _etag(i).encode(), extra, after_204)
            )
        sections.append(
            b"--%s\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n%s\r\n"
            % (changeset.encode(), http)
        )
    return b"%s--%s\r\nContent-Type: multipart/mixed; boundary=%s\r\n\r\n%s--%s--\r\n--%s--%s" % (
        preamble,
        batch.encode(),
        changeset.encode(),
        b"".join(sections),
        changeset.encode(),
        batch.encode(),
        epilogue,
    )


BATCH_TYPE = "multipart/mixed; boundary=batchresponse_d3bd9a6c-1f4e-4a2b-9c5e-2b1e4bbf3c71"
THREE: list[Any] = [
    ("create", {"PartitionKey": "p", "RowKey": "a"}),
    ("upsert", {"PartitionKey": "p", "RowKey": "b"}),
    ("update", {"PartitionKey": "p", "RowKey": "c"}, {"etag": _etag(9), **IF_NOT_MODIFIED}),
]
VARIANTS: dict[str, tuple[bytes, str] | tuple[bytes, str, list[Any]]] = {
    "documented": (_documented(), BATCH_TYPE),
    "one operation": (_documented(1), BATCH_TYPE, THREE[:1]),
    "extra headers": (
        _documented(extra=b"x-ms-request-id: 1\r\nX-Odd:  two  spaces \r\nEmpty:\r\n"),
        BATCH_TYPE,
    ),
    "preamble and epilogue": (
        _documented(preamble=b"This is a preamble.\r\n", epilogue=b"\r\nAn epilogue.\r\n"),
        BATCH_TYPE,
    ),
    "quoted boundary": (_documented(), BATCH_TYPE.replace("=batchresponse", '="batchresponse') + '"'),
    "charset parameter": (_documented(), BATCH_TYPE.replace(";", "; charset=utf-8;")),
    "no trailing line break": (_documented(epilogue=b""), BATCH_TYPE),
    "blank lines after a 204": (_documented(after_204=b"\r\n\r\n"), BATCH_TYPE),
    "other boundaries": (
        _documented(batch="batchresponse_1", changeset="changesetresponse_'a+b'"),
        "multipart/mixed; boundary=batchresponse_1",
    ),
    "refusal": (_documented(refuse=1), BATCH_TYPE),
    "refusal alone": (_documented(1, refuse=0), BATCH_TYPE),
}


@pytest.mark.parametrize("variant", VARIANTS.values(), ids=VARIANTS.keys())
async def test_hand_built_answers_read_alike_and_give_the_sdks_results(
    answering: tuple[AnswerServer, TableClient],
    variant: tuple[Any, ...],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, client = answering
    body, content_type, operations = (*variant, THREE) if len(variant) == 2 else variant
    server.answers = [(202, body, content_type)] * 3
    response, requests, batch, changeset = await send(client, operations)
    ours = _ours(parse(response.content, response.headers["Content-Type"]))
    assert ours == _as_read(await sdk_parts(response, requests, batch, changeset))
    with caplog.at_level(logging.WARNING, logger=table_batch.__name__):
        sdk_result = await _outcome(client.submit_transaction(operations))
        our_result = await _outcome(submit_transaction(client, operations))
    assert our_result == sdk_result
    assert caplog.records == []  # read by our parser, not handed over


async def _outcome(call: Awaitable[Any]) -> Any:
    try:
        return await call
    except HttpResponseError as exc:
        return _error(exc)
    except Exception as exc:  # what azure-core's parser raises for a malformed answer
        return (type(exc), str(exc))


def _odata_error(code: str, message: str) -> bytes:
    return b'{"odata.error":{"code":"%s","message":{"lang":"en-US","value":"%s"}}}' % (
        code.encode(),
        message.encode(),
    )


ODATA_JSON = "application/json;odata=minimalmetadata;streaming=true;charset=utf-8"
BATCH_REFUSALS: dict[str, tuple[int, bytes, str, type[Exception]]] = {
    "413 for the batch": (
        413,
        _odata_error("RequestBodyTooLarge", "The request body is too large and exceeds the maximum."),
        ODATA_JSON,
        RequestTooLargeError,
    ),
    "413 in a part": (
        202,
        _documented(1, refuse=0).replace(b"412 Precondition Failed", b"413 Request Entity Too Large"),
        BATCH_TYPE,
        RequestTooLargeError,
    ),
    "400 for the batch": (
        400,
        _odata_error("InvalidInput", "0:One of the request inputs is not valid."),
        ODATA_JSON,
        HttpResponseError,
    ),
    "403 for the batch": (
        403,
        _odata_error("AuthenticationFailed", "Server failed to authenticate the request."),
        ODATA_JSON,
        HttpResponseError,
    ),
}


@pytest.mark.parametrize(
    "status, body, content_type, kind", BATCH_REFUSALS.values(), ids=BATCH_REFUSALS.keys()
)
async def test_a_refused_batch_raises_the_sdks_error(
    answering: tuple[AnswerServer, TableClient],
    status: int,
    body: bytes,
    content_type: str,
    kind: type[Exception],
) -> None:
    server, client = answering
    server.answers = [(status, body, content_type)] * 2
    with pytest.raises(HttpResponseError) as sdk:
        await client.submit_transaction(THREE)
    with pytest.raises(HttpResponseError) as ours:
        await submit_transaction(client, THREE)
    assert _error(ours.value) == _error(sdk.value)
    assert isinstance(ours.value, kind)


async def test_a_refusal_that_blames_the_table_name_says_why_as_the_sdk_does(
    answering: tuple[AnswerServer, TableClient],
) -> None:
    server, _ = answering
    refusal = _odata_error("InvalidResourceName", "The specified resource name contains invalid characters.")
    server.answers = [(400, refusal, ODATA_JSON)] * 2
    async with TableClient.from_connection_string(server.connection, "bad_name") as client:
        with pytest.raises(ValueError) as sdk:
            await client.submit_transaction(THREE)
        with pytest.raises(ValueError) as ours:
            await submit_transaction(client, THREE)
    assert (type(ours.value), str(ours.value)) == (type(sdk.value), str(sdk.value))
    assert "table names" in str(ours.value)


def test_parse_reads_status_headers_and_body_of_each_part() -> None:
    first, second, third = parse(_documented(refuse=2), BATCH_TYPE)
    assert (first.status, first.reason, first.header("etag")) == (201, "Created", _etag(0))
    assert first.body.decode().endswith('"N":1}') and "\U0001f600" in first.body.decode()
    assert (second.status, second.reason, second.body, second.header("Content-ID")) == (
        204,
        "No Content",
        b"",
        "2",
    )
    assert (third.status, third.reason) == (412, "Precondition Failed")
    assert third.body.startswith(b'{"odata.error"') and third.body.endswith(b"}}}")


# ---- 3. fallback to azure-core's parser -------------------------------------------------------------
UNEXPECTED: dict[str, tuple[bytes, str, str]] = {
    "fewer parts than operations": (_documented(2), BATCH_TYPE, "as many answers as operations"),
    "more parts than operations": (_documented(4), BATCH_TYPE, "as many answers as operations"),
    "no status line": (
        _documented().replace(b"HTTP/1.1 204 No Content\r\n", b"", 1),
        BATCH_TYPE,
        "no HTTP status line",
    ),
    "no boundary": (_documented(), "multipart/mixed", "no boundary"),
    "another boundary": (_documented(), BATCH_TYPE.replace("d3bd", "0000"), "boundary not found"),
    "bare line feeds": (_documented().replace(b"\r\n", b"\n"), BATCH_TYPE, "no line break after a boundary"),
    "folded header": (
        _documented().replace(b"Cache-Control: no-cache\r\n", b"Cache-Control:\r\n no-cache\r\n"),
        BATCH_TYPE,
        "a header line that is not",
    ),
    "no closing boundary": (
        _documented().split(b"--changesetresponse_7f1f4b2e-6d8c-4e3a-b6f1-0c5d2e9a8b47--")[0],
        BATCH_TYPE,
        "no closing boundary",
    ),
}


@pytest.mark.parametrize("body, content_type, kind", UNEXPECTED.values(), ids=UNEXPECTED.keys())
async def test_an_unexpected_answer_is_read_by_azure_core_with_one_warning(
    answering: tuple[AnswerServer, TableClient],
    body: bytes,
    content_type: str,
    kind: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, client = answering
    monkeypatch.setattr(table_batch, "_warned", set())
    server.answers = [(202, body, content_type)] * 3
    with caplog.at_level(logging.WARNING, logger=table_batch.__name__):
        sdk_result = await _outcome(client.submit_transaction(THREE))
        our_result = await _outcome(submit_transaction(client, THREE))
        again = await _outcome(submit_transaction(client, THREE))
    assert our_result == sdk_result == again
    [warning] = caplog.records  # once per kind of surprise, not once per transaction
    assert warning.levelno == logging.WARNING and kind in warning.getMessage()


def test_parse_names_what_it_did_not_expect() -> None:
    with pytest.raises(UnexpectedAnswer, match="no HTTP status line"):
        parse(UNEXPECTED["no status line"][0], BATCH_TYPE)
    with pytest.raises(UnexpectedAnswer, match="not multipart/mixed"):
        parse(b"{}", "application/json")


# ---- 4. the private names used ----------------------------------------------------------------------
def test_the_private_names_used_are_still_there(azurite_connection_string: str) -> None:
    """If this fails, the installed azure-data-tables moved a name adapters/table_batch.py relies on."""
    missing = [
        f"{module}.{name}"
        for module, names in PRIVATE_NAMES.items()
        for name in names
        if not hasattr(importlib.import_module(module), name)
    ]
    client = TableClient.from_connection_string(azurite_connection_string, "anytable")
    for path in PRIVATE_CLIENT_ATTRIBUTES:
        target: Any = client
        for attribute in path.split("."):
            if not hasattr(target, attribute):
                missing.append(f"TableClient.{path}")
                break
            target = getattr(target, attribute)
    assert not missing, (
        f"azure-data-tables no longer has {missing}: adapters/table_batch.py uses them. Keep the pinned "
        "version in requirements.txt, or adapt table_batch.py until this file passes (requests equal the "
        "SDK's byte for byte)."
    )


async def test_the_store_writes_through_this_module(
    azurite_connection_string: str, new_table: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[int] = []

    def counting(body: bytes, content_type: str) -> list[PartAnswer]:
        read.append(1)
        return parse(body, content_type)

    monkeypatch.setattr(table_batch, "parse", counting)
    async with TableServiceClient.from_connection_string(azurite_connection_string) as service:
        store = TableStateStore(service.get_table_client(new_table()), service.get_table_client(new_table()))
        _, record = await store.create(new_record("o-1"))
        record.state.failure_count = 1
        await store.save(record)
        assert len(read) == 2
