"""Entity-group transactions written and read with plain byte operations.

``TableClient.submit_transaction`` composes the ``$batch`` body and reads its answer with azure-core's
multipart support, which is built on the standard library's ``email`` package: in a profile of the
workers under load that was the largest single cost of a state save. Every state change here is one
transaction, so :func:`submit_transaction` does the same thing at a fraction of the CPU:

- **The request is the SDK's, byte for byte.** The SDK's own builder makes each operation's request
  (entity serialisation, keys in the URL, ``If-Match``); :func:`compose` lays them out exactly as
  azure-core's serialiser does (an OData ``$batch`` holding one changeset of ``application/http``
  parts), and the outer request goes through the client's own pipeline (authentication, retries,
  logging, tracing). ``tests/adapters/test_table_batch.py`` captures both requests on their way to the
  service and compares them.
- **The answer is read the SDK's way whenever it is not a plain success.** :func:`parse` reads a
  success (202 holding one 2xx part per operation); a refusal, or anything :func:`parse` does not
  expect (a different number of parts, a missing boundary or status line, a folded header, ...) is read
  again, from the same bytes, by azure-core's parser and turned into the SDK's own error
  (:class:`~azure.data.tables.TableTransactionError` with ``status_code`` and ``error_code``,
  :class:`~azure.data.tables.RequestTooLargeError` for 413). The unexpected cases log a WARNING, once
  per kind and process, so the worst case is the SDK's behaviour and its cost.

Private names of azure-data-tables (the package is pinned in requirements.txt) are used only where the
SDK offers no public way: they are listed in :data:`PRIVATE_NAMES`. Upgrading the package needs
``tests/adapters/test_table_batch.py`` to pass, in particular its check of those names and its
request-equivalence tests.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from wsgiref.handlers import format_date_time

from azure.core.rest import AsyncHttpResponse, HttpRequest
from azure.core.tracing.decorator_async import distributed_trace_async
from azure.data.tables import RequestTooLargeError, TableTransactionError

# ---- private names of azure-data-tables -------------------------------------------------------------
# Pinned with the package (requirements.txt); tests/adapters/test_table_batch.py fails with a clear
# message if one is gone. Each is what the SDK's own submit_transaction uses for the same purpose.
from azure.data.tables._error import _decode_error, _validate_tablename_error  # the SDK's errors
from azure.data.tables._policies import StorageHeadersPolicy  # the parts' policy, for azure-core's reader
from azure.data.tables._table_batch import TableBatchOperations  # builds each operation's request
from azure.data.tables.aio import TableClient

from .table_operations import OperationRequest, build

PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "azure.data.tables._error": ("_decode_error", "_validate_tablename_error"),
    "azure.data.tables._policies": ("StorageHeadersPolicy",),
    "azure.data.tables._table_batch": ("TableBatchOperations",),
}
# Attributes of the aio TableClient read here: its generated client (pipeline and configuration), the
# account host and whether the endpoint is Cosmos DB's (which changes how the builder writes merges).
PRIVATE_CLIENT_ATTRIBUTES = ("_client", "_client._config", "_primary_hostname", "_cosmos_endpoint")

_log = logging.getLogger(__name__)
_warned: set[str] = set()

_CRLF = b"\r\n"
# http.client, which serialises each part in the SDK, sends Content-Length: 0 for these without a body.
_METHODS_EXPECTING_BODY = frozenset({"PATCH", "POST", "PUT"})
_STATUS_LINE = re.compile(r"HTTP/1\.[01] ([0-9]{3})(?: (.*))?")
_PLAIN_ENCODINGS = frozenset({"", "binary", "7bit", "8bit"})


class UnexpectedAnswer(ValueError):
    """The answer is not in the shape :func:`parse` reads; azure-core's parser reads it instead.

    ``kind`` names what was unexpected in a few fixed words (the WARNING is logged once per kind).
    """

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


@dataclass(frozen=True)
class PartAnswer:
    """One operation's answer inside the batch response."""

    status: int
    reason: str
    headers: list[tuple[str, str]]  # as sent, in order
    body: bytes

    def header(self, name: str) -> str | None:
        """The last value of header ``name`` (any case), as azure-core's header mapping gives it."""
        found = None
        for key, value in self.headers:
            if key.lower() == name.lower():
                found = value
        return found


# ---- the request ------------------------------------------------------------------------------------
def _part(index: int, request: HttpRequest | OperationRequest, date: str) -> bytes:
    """One operation as an ``application/http`` part, laid out as http.client writes a request."""
    content = request.content
    body: bytes | None = content.encode("latin-1") if isinstance(content, str) else content
    headers = dict(request.headers)
    headers["x-ms-date"] = date  # what the SDK's StorageHeadersPolicy adds to every part
    headers["Date"] = date
    lines = [f"{request.method} {request.url} HTTP/1.1".encode("ascii")]
    if not any(name.lower() == "content-length" for name in headers):
        # http.client puts a missing Content-Length first, and 0 for a bodiless POST/PUT/PATCH.
        if body is not None:
            lines.append(b"Content-Length: %d" % len(body))
        elif request.method.upper() in _METHODS_EXPECTING_BODY:
            lines.append(b"Content-Length: 0")
    lines += [f"{name}: {value}".encode("latin-1") for name, value in headers.items()]
    mime = (
        b"Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\nContent-ID: %d\r\n" % index
    )
    return mime + _CRLF + _CRLF.join(lines) + _CRLF + _CRLF + (body or b"")


def compose(
    requests: Iterable[HttpRequest | OperationRequest], batch: str, changeset: str, date: str
) -> bytes:
    """The ``$batch`` body: one changeset holding one part per request, between the two boundaries."""
    opening = b"--%s\r\n" % changeset.encode("ascii")
    parts = b"".join(opening + _part(i, request, date) + _CRLF for i, request in enumerate(requests))
    return b"--%s\r\nContent-Type: multipart/mixed; boundary=%s\r\n\r\n%s--%s--\r\n\r\n--%s--\r\n" % (
        batch.encode("ascii"),
        changeset.encode("ascii"),
        parts,
        changeset.encode("ascii"),
        batch.encode("ascii"),
    )


# ---- the answer -------------------------------------------------------------------------------------
def _params(content_type: str) -> tuple[str, dict[str, str]]:
    kind, *params = content_type.split(";")
    values = {}
    for param in params:
        name, _, value = param.strip().partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        values[name.strip().lower()] = value
    return kind.strip().lower(), values


def _boundary(content_type: str) -> bytes:
    kind, params = _params(content_type)
    if kind != "multipart/mixed":
        raise UnexpectedAnswer("not multipart/mixed", repr(content_type))
    boundary = params.get("boundary", "")
    if not boundary or not boundary.isascii():
        raise UnexpectedAnswer("no boundary", repr(content_type))
    return boundary.encode("ascii")


def _sections(body: bytes, boundary: bytes) -> list[bytes]:
    """The parts of a multipart body (RFC 2046): the preamble and epilogue are left out."""
    delimiter = b"--" + boundary
    separator = _CRLF + delimiter
    if body.startswith(delimiter):
        position = len(delimiter)
    else:
        start = body.find(separator)
        if start < 0:
            raise UnexpectedAnswer("boundary not found", repr(boundary))
        position = start + len(separator)
    sections = []
    while not body.startswith(b"--", position):  # the closing delimiter; the epilogue follows
        line_end = body.find(_CRLF, position)
        if line_end < 0 or body[position:line_end].strip(b" \t"):
            raise UnexpectedAnswer("no line break after a boundary", repr(boundary))
        end = body.find(separator, line_end)
        if end < 0:
            raise UnexpectedAnswer("no closing boundary", repr(boundary))
        sections.append(body[line_end + 2 : end])
        position = end + len(separator)
    return sections


def _headers(block: bytes) -> list[tuple[str, str]]:
    headers = []
    for line in block.split(_CRLF) if block else []:
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon or not name or name[0] in " \t":
            raise UnexpectedAnswer("a header line that is not 'name: value'", repr(line[:80]))
        headers.append((name, value.lstrip(" \t")))
    return headers


def _split_head(message: bytes) -> tuple[bytes, bytes]:
    if message.startswith(_CRLF):
        return b"", message[2:]
    head, blank, rest = message.partition(b"\r\n\r\n")
    if not blank:
        raise UnexpectedAnswer("no blank line after a part's headers")
    return head, rest


def _answer(section: bytes) -> PartAnswer:
    """One ``application/http`` part (its MIME headers already checked) as status, headers and body."""
    head, body = _split_head(section)
    status_line, _, header_block = head.partition(_CRLF)
    match = _STATUS_LINE.fullmatch(status_line.decode("latin-1"))
    if match is None:
        raise UnexpectedAnswer("no HTTP status line", repr(status_line[:80]))
    status = int(match[1])
    headers = _headers(header_block)
    lower = {name.lower(): value for name, value in headers}
    if "transfer-encoding" in lower:
        raise UnexpectedAnswer("a Transfer-Encoding in a part")
    if status in (204, 304) or 100 <= status < 200:
        body = b""  # http.client reads no body for these
    elif "content-length" in lower:
        length = lower["content-length"].strip()
        if not length.isdigit() or int(length) > len(body):
            raise UnexpectedAnswer("a part's Content-Length does not fit its body", repr(length))
        body = body[: int(length)]
    return PartAnswer(status, (match[2] or "").strip(), headers, body)


def parse(body: bytes, content_type: str) -> list[PartAnswer]:
    """The operations' answers in a ``$batch`` response, in order.

    The batch holds changesets (``multipart/mixed``, one ``application/http`` part per operation) or
    ``application/http`` parts directly, as azure-core reads it. Raises :class:`UnexpectedAnswer` for
    anything else.
    """
    answers: list[PartAnswer] = []
    for section in _sections(body, _boundary(content_type)):
        head, inner = _split_head(section)
        content_type = next((v for n, v in _headers(head) if n.lower() == "content-type"), "")
        kind = _params(content_type)[0]
        if kind == "multipart/mixed":
            answers += [_http_part(part) for part in _sections(inner, _boundary(content_type))]
        elif kind == "application/http":
            answers.append(_http_part(section))
        else:
            raise UnexpectedAnswer("a batch part of another content type", repr(kind))
    return answers


def _http_part(section: bytes) -> PartAnswer:
    head, message = _split_head(section)
    headers = {name.lower(): value.strip().lower() for name, value in _headers(head)}
    if _params(headers.get("content-type", ""))[0] != "application/http":
        raise UnexpectedAnswer("a part that is not application/http", repr(headers.get("content-type")))
    if headers.get("content-transfer-encoding", "") not in _PLAIN_ENCODINGS:
        raise UnexpectedAnswer("a part's transfer encoding", repr(headers["content-transfer-encoding"]))
    return _answer(message)


def _warn_once(unexpected: UnexpectedAnswer) -> None:
    if unexpected.kind not in _warned:
        _warned.add(unexpected.kind)
        _log.warning("A transaction's answer is read by azure-core's parser instead (%s)", unexpected)


# ---- azure-core's reading, the SDK's errors ---------------------------------------------------------
async def sdk_parts(
    response: AsyncHttpResponse, requests: list[HttpRequest | OperationRequest], batch: str, changeset: str
) -> list[AsyncHttpResponse]:
    """The answer's parts as azure-core reads them for the SDK (the ``email`` parser), from the same bytes.

    The multipart description is attached to the sent request after the fact, as the SDK attaches it
    before sending, so that ``response.parts()`` can match each part with its request.
    """
    policies = [StorageHeadersPolicy()]
    changeset_request = HttpRequest("POST", "")
    sdk_requests = [r.as_http_request() if isinstance(r, OperationRequest) else r for r in requests]
    changeset_request.set_multipart_mixed(*sdk_requests, policies=policies, boundary=changeset)
    response.request.set_multipart_mixed(
        changeset_request, policies=policies, enforce_https=False, boundary=batch
    )
    parts = []
    async for part in response.parts():  # type: ignore[attr-defined]  # the back-compat mixin has it
        await part.read()
        parts.append(part)
    return parts


def _too_large(response: AsyncHttpResponse) -> RequestTooLargeError:
    error: RequestTooLargeError = _decode_error(
        response, error_message="The transaction request was too large", error_type=RequestTooLargeError
    )
    return error


async def _read_as_the_sdk(
    table_name: str,
    response: AsyncHttpResponse,
    requests: list[HttpRequest | OperationRequest],
    batch: str,
    changeset: str,
) -> list[Mapping[str, Any]]:
    """The SDK's results or error for this response, read by azure-core's parser."""
    parts = await sdk_parts(response, requests, batch, changeset)
    refused = [part for part in parts if not 200 <= part.status_code < 300]
    if not refused:
        return [{"etag": part.headers["Etag"]} if "Etag" in part.headers else {} for part in parts]
    if refused[0].status_code == 413:
        raise _too_large(response)
    error = _decode_error(response=refused[0], error_type=TableTransactionError)
    _validate_tablename_error(error, table_name)
    raise error


def _builder(table: TableClient, operations: Iterable[Any]) -> TableBatchOperations:
    builder = TableBatchOperations(
        config=table._client._config,
        endpoint=f"{table.scheme}://{table._primary_hostname}",
        table_name=table.table_name,
        is_cosmos_endpoint=table._cosmos_endpoint,
    )
    try:
        for operation in operations:
            builder.add_operation(operation)
    except TypeError as exc:  # the SDK's own wording for a malformed operation
        raise TypeError(
            "The value of 'operations' must be an iterator or async iterator "
            "of Tuples. Please check documentation for correct Tuple format."
        ) from exc
    return builder


def operation_requests(table: TableClient, operations: list[Any]) -> list[HttpRequest | OperationRequest]:
    """Each operation's request: built here for the store's shapes (:mod:`adapters.table_operations`),
    by the SDK's builder for anything else (and its errors for a malformed operation)."""
    endpoint = f"{table.scheme}://{table._primary_hostname}"
    built = (
        None if table._cosmos_endpoint else build(endpoint, table.table_name, table.api_version, operations)
    )
    return list(built if built is not None else _builder(table, operations).requests)


async def send(
    table: TableClient, operations: list[Any], **kwargs: Any
) -> tuple[AsyncHttpResponse, list[HttpRequest | OperationRequest], str, str]:
    """Send the transaction; returns the read response, the operations' requests and the two boundaries."""
    requests = operation_requests(table, operations)
    batch, changeset = f"batch_{uuid.uuid4()}", f"changeset_{uuid.uuid4()}"
    request = HttpRequest(
        "POST",
        f"{table.scheme}://{table._primary_hostname}/$batch",
        headers={
            "x-ms-version": table.api_version,
            "DataServiceVersion": "3.0",
            "MaxDataServiceVersion": "3.0;NetFx",
            "Content-Type": f"multipart/mixed; boundary={batch}",
            "Accept": "application/json",
        },
        content=compose(requests, batch, changeset, format_date_time(time.time())),
    )
    # The SDK sets the body after the headers: Content-Length comes last, as in its request.
    request.headers["Content-Length"] = request.headers.pop("Content-Length")
    response = await table._client.send_request(request, stream=True, **kwargs)
    await response.read()
    return response, requests, batch, changeset


@distributed_trace_async(name_of_span="TableClient.submit_transaction")
async def submit_transaction(
    table: TableClient, operations: Iterable[Any], **kwargs: Any
) -> list[Mapping[str, Any]]:
    """What ``table.submit_transaction(operations, **kwargs)`` does (same request, results and errors).

    ``operations`` are the SDK's tuples (``("create", entity)``, ``("update", entity, {...})``, ...).
    Returns each operation's metadata (``{"etag": ...}``), in order. Unlike the SDK, an empty
    transaction sends nothing and returns ``[]`` (the SDK sends it and returns ``[]`` on the refusal).
    """
    operations = list(operations)
    if not operations:
        return []
    response, requests, batch, changeset = await send(table, operations, **kwargs)
    if response.status_code == 413:
        raise _too_large(response)
    if response.status_code != 202:
        error = _decode_error(response)
        _validate_tablename_error(error, table.table_name)
        raise error
    try:
        answers = parse(response.content, response.headers.get("Content-Type", ""))
        if any(not 200 <= answer.status < 300 for answer in answers):
            answers = []  # a refusal: the SDK's reader makes the SDK's error
        elif len(answers) != len(requests):
            raise UnexpectedAnswer(
                "as many answers as operations expected", f"{len(answers)} to {len(requests)}"
            )
    except UnexpectedAnswer as exc:
        _warn_once(exc)
        answers = []
    if not answers:
        return await _read_as_the_sdk(table.table_name, response, requests, batch, changeset)
    results: list[Mapping[str, Any]] = []
    for answer in answers:
        etag = answer.header("ETag")
        results.append({"etag": etag} if etag is not None else {})
    return results
