"""Each operation of a transaction as the SDK's builder writes it, for the shapes the state store sends.

The SDK's ``TableBatchOperations`` makes every operation a full ``azure.core.rest.HttpRequest`` through
its generated request builders and serialiser: about 0.4 ms of CPU for a save's four operations, more
than the rest of the transaction's composing. :func:`build` writes the same method, URL, headers and
JSON body directly, for the operations the store makes: ``create``, ``update`` and ``upsert`` (merge or
replace) and ``delete``, unconditional or conditional on an ETag, of plain dict entities whose values are
``str``, ``bool``, 32-bit ``int``, finite ``float``, ``datetime`` or ``None``. For anything else (another
value type, ``TableEntity`` metadata, other keyword arguments or match conditions, a Cosmos DB endpoint,
a malformed operation) it returns None and the SDK's builder builds the whole transaction, raising its
own errors. ``tests/adapters/test_table_batch.py`` holds the result to the SDK's requests byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from azure.core import MatchConditions
from azure.core.rest import HttpRequest
from azure.data.tables import UpdateMode

_INT32 = range(-(2**31), 2**31)
_JSON = "application/json"
_MINIMAL_METADATA = "application/json;odata=minimalmetadata"
_KEYWORDS = frozenset({"mode", "etag", "match_condition"})


@dataclass(frozen=True)
class OperationRequest:
    """One operation's request: what :func:`adapters.table_batch.compose` writes of it."""

    method: str
    url: str
    headers: dict[str, str]
    content: str | None = None

    def as_http_request(self) -> HttpRequest:
        """The same request as azure-core's type, for its multipart reader (a refusal's slow path)."""
        return HttpRequest(self.method, self.url, headers=self.headers, content=self.content)


class _NotPlain(Exception):
    """The operation is not one of the shapes built here: the SDK's builder takes the transaction."""


def _value(name: str, value: Any, into: dict[str, Any]) -> None:
    # The SDK's conversions (azure.data.tables._serialize), for the exact types only: a subclass (a str
    # Enum, a datetime that keeps the service's text) converts differently there.
    kind = type(value)
    if kind is str:
        into[name] = value
        into[name + "@odata.type"] = "Edm.String"
    elif kind is bool:
        into[name] = value
    elif kind is int:
        if value not in _INT32:
            raise _NotPlain
        into[name] = value
    elif kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise _NotPlain
        into[name] = value
        into[name + "@odata.type"] = "Edm.Double"
    elif kind is datetime:
        moved = value.astimezone(UTC)
        try:
            into[name] = moved.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        except ValueError:
            into[name] = moved.strftime("%Y-%m-%dT%H:%M:%SZ")
        into[name + "@odata.type"] = "Edm.DateTime"
    elif value is not None:
        raise _NotPlain


def _body(entity: Mapping[str, Any]) -> str:
    properties: dict[str, Any] = {}
    for name, value in entity.items():
        _value(name, value, properties)
    return json.dumps(properties)


def _key(value: Any) -> str:
    if type(value) is not str:
        raise _NotPlain
    return quote(value.replace("'", "''"), safe="")


def _if_match(etag: Any, condition: Any) -> str:
    """The If-Match value of the SDK's ``_get_match_condition`` then ``prep_if_match``."""
    if condition is None or condition == MatchConditions.Unconditionally:
        if etag:
            raise _NotPlain  # the SDK refuses an ETag on an unconditional operation
        return "*"
    if condition == MatchConditions.IfNotModified and etag and type(etag) is str:
        return etag
    raise _NotPlain


def _one(base: str, table: str, version: str, operation: Sequence[Any]) -> tuple[str, OperationRequest]:
    if not isinstance(operation, tuple) or len(operation) not in (2, 3):
        raise _NotPlain
    kind, entity = operation[0], operation[1]
    options: Mapping[str, Any] = operation[2] if len(operation) == 3 else {}
    if type(entity) is not dict or not isinstance(options, Mapping) or not set(options) <= _KEYWORDS:
        raise _NotPlain
    kind = kind.lower() if isinstance(kind, str) else None
    partition = _key(entity.get("PartitionKey"))  # as it goes in the URL: equal keys, equal text
    url = f"{base}/{table}(PartitionKey='{partition}',RowKey='{_key(entity.get('RowKey'))}')"
    common = {"x-ms-version": version, "DataServiceVersion": "3.0"}
    if kind == "delete":
        if "mode" in options:
            raise _NotPlain
        headers = {**common, "Accept": _MINIMAL_METADATA}
        headers["If-Match"] = _if_match(options.get("etag"), options.get("match_condition"))
        return partition, OperationRequest("DELETE", url, headers)
    body = _body(entity)
    content = {"Content-Type": _JSON, "Content-Length": str(len(body))}
    if kind == "create":
        if options:
            raise _NotPlain
        headers = {**content, **common, "Accept": _MINIMAL_METADATA}
        return partition, OperationRequest("POST", f"{base}/{table}", headers, body)
    # Compared as the SDK compares it (an UpdateMode, or its exact value as text).
    mode = options.get("mode", UpdateMode.MERGE)
    if mode == UpdateMode.MERGE:
        method = "PATCH"
    elif mode == UpdateMode.REPLACE:
        method = "PUT"
    else:
        raise _NotPlain
    headers = {**content, **common, "Accept": _JSON}
    if kind == "update":
        headers["If-Match"] = _if_match(options.get("etag"), options.get("match_condition"))
    elif kind != "upsert" or "etag" in options or "match_condition" in options:
        raise _NotPlain
    return partition, OperationRequest(method, url, headers, body)


def build(
    endpoint: str, table: str, version: str, operations: Sequence[Any]
) -> list[OperationRequest] | None:
    """The operations' requests, or None if one is not of a shape built here (see the module's text).

    ``endpoint`` is the account's URL as the SDK's builder takes it (``scheme://host[/account]``),
    ``version`` the client's service version (its ``x-ms-version``).
    """
    built: list[OperationRequest] = []
    partitions: set[str] = set()
    quoted = quote(table, safe="")
    try:
        for operation in operations:
            partition, request = _one(endpoint, quoted, version, operation)
            partitions.add(partition)
            built.append(request)
    except _NotPlain:
        return None
    # One partition per transaction, as the SDK checks (it raises for more: let it say so).
    if len(partitions) > 1:
        return None
    return built
