"""Sensitive input fields: sealed at rest, redacted in every read, dropped once no step needs them.

A workflow's input model marks a field sensitive (:func:`engine.workflow.sensitive`); the engine knows no
more than that: these fields, each needed until one step of the workflow is done (or until the order
ends). What it does with them:

- **Sealed at submission**, before anything is written (:func:`seal_input`): each value becomes an
  envelope, ``sealed:v1:<key id>:<nonce>:<ciphertext>`` (nonce and ciphertext in unpadded base64url),
  encrypted with AES-256-GCM under the current key of the :class:`Keyring`, with the order's id and the
  field's name as associated data, so a sealed value cannot be moved to another order or field. The
  stored input, the saved copies in messages, the Agents' requests and their dead letters carry only
  the envelope.
- **Opened only where a call's body is built** (:func:`open_input`, by the services' client), with the
  current key or any previous one (rotation). A value that is not an envelope is used as it is: an order
  stored by a release that kept it in clear is still processed.
- **Redacted in every read** (:func:`redacted_input`): a value the API, the console or any tool shows is
  :data:`engine.calls.REDACTED` (or absent, once dropped).
- **Dropped from the stored input** by the save that makes it unneeded (:func:`settle_input`): the one
  that records its step done, the one that turns the order to its undo (a forward step never runs again),
  or at the latest the one that ends the order, before it moves to the history. The same save seals a
  value an older release stored in clear.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .calls import REDACTED
from .state import Phase, StepStatus

if TYPE_CHECKING:
    from .state import TaskRecord
    from .workflow import WorkflowDefinition

PREFIX = "sealed:v1:"
KEY_ID = re.compile(r"^[a-z0-9-]{1,16}$")
KEY_BYTES = 32
NONCE_BYTES = 12
_DONE = (StepStatus.COMPLETED, StepStatus.LEFT_OUT)


class SealError(ValueError):
    """A sealed value that cannot be opened: a key this process does not hold, or a value changed, cut or
    moved from another order or field."""


@dataclass(frozen=True)
class InputKey:
    """One key: its id (named in every value it seals) and its 32 bytes."""

    key_id: str
    secret: bytes = field(repr=False)

    @classmethod
    def parse(cls, text: str) -> InputKey:
        """A key from ``<key id>:<base64 of 32 random bytes>``; ValueError saying what is wrong (never
        quoting the secret)."""
        key_id, colon, encoded = text.strip().partition(":")
        if not colon or not KEY_ID.match(key_id):
            raise ValueError("expected <key id>:<base64 of 32 bytes>, the key id 1-16 of a-z, 0-9 and -")
        try:
            secret = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"key {key_id}: the secret is not base64") from None
        if len(secret) != KEY_BYTES:
            raise ValueError(f"key {key_id}: the secret is {len(secret)} bytes, not {KEY_BYTES}")
        return cls(key_id, secret)

    @classmethod
    def generate(cls, key_id: str) -> InputKey:
        """A new random key (the devhost's, a test's)."""
        return cls(key_id, os.urandom(KEY_BYTES))

    def text(self) -> str:
        """The key as the setting holds it."""
        return f"{self.key_id}:{base64.b64encode(self.secret).decode()}"


@dataclass(frozen=True)
class Keyring:
    """The key that seals (``current``) and the keys that may still open what older ones sealed
    (``previous``: kept until no order in flight holds a value they sealed)."""

    current: InputKey
    previous: tuple[InputKey, ...] = ()
    # Where nonces come from (a seeded source keeps a simulated run reproducible).
    nonces: Callable[[int], bytes] = field(default=os.urandom, repr=False, compare=False)

    def __post_init__(self) -> None:
        ids = [self.current.key_id, *(k.key_id for k in self.previous)]
        if len(set(ids)) != len(ids):
            raise ValueError("each key id must be used once (the current key and the previous ones)")

    def seal(self, value: Any, order_id: str, name: str) -> str:
        """``value`` (any JSON value) as an envelope bound to the order and the field."""
        nonce = self.nonces(NONCE_BYTES)
        plain = json.dumps(value, separators=(",", ":")).encode()
        sealed = AESGCM(self.current.secret).encrypt(nonce, plain, _associated(order_id, name))
        return f"{PREFIX}{self.current.key_id}:{_b64(nonce)}:{_b64(sealed)}"

    def open(self, envelope: str, order_id: str, name: str) -> Any:
        """The value an envelope holds; :class:`SealError` if it cannot be opened."""
        key_id, _, rest = envelope.removeprefix(PREFIX).partition(":")
        nonce_text, _, sealed_text = rest.partition(":")
        key = next((k for k in (self.current, *self.previous) if k.key_id == key_id), None)
        if key is None:
            held = ", ".join(k.key_id for k in (self.current, *self.previous))
            raise SealError(
                f"input field {name} is sealed with key {key_id!r}, which this app does not hold (it holds "
                f"{held}): give it in INPUT_ENCRYPTION_PREVIOUS_KEYS"
            )
        try:
            nonce, sealed = _unb64(nonce_text), _unb64(sealed_text)
            plain = AESGCM(key.secret).decrypt(nonce, sealed, _associated(order_id, name))
            return json.loads(plain)
        except (InvalidTag, ValueError) as exc:
            raise SealError(
                f"input field {name} of order {order_id} does not open: changed or moved"
            ) from exc

    def fingerprint(self, text: str) -> str:
        """A keyed digest of ``text`` (an order's body hash: a plain hash of a body that holds a token would
        let whoever reads the store try guesses at the token)."""
        return _digest(self.current, text)

    def fingerprints(self, text: str) -> frozenset[str]:
        """Every form the body hash of ``text`` may be stored in: keyed with the current key or a previous
        one (an order submitted before a rotation), or plain (one submitted by a release that stored the
        field in clear), so the same body resubmitted across a rotation or an upgrade still compares
        equal."""
        return frozenset({text, *(_digest(k, text) for k in (self.current, *self.previous))})


def _digest(key: InputKey, text: str) -> str:
    return "k:" + hmac.new(key.secret, text.encode(), hashlib.sha256).hexdigest()


def _associated(order_id: str, name: str) -> bytes:
    return f"{order_id}\x00{name}".encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def is_sealed(value: Any) -> bool:
    """Whether ``value`` is an envelope."""
    return isinstance(value, str) and value.startswith(PREFIX)


class KeyMissing(RuntimeError):
    """A sensitive value to seal, and no key to seal it with."""


def seal_input(
    values: Mapping[str, Any], sensitive: Mapping[str, str | None], order_id: str, keys: Keyring | None
) -> dict[str, Any]:
    """The input with every sensitive value given (not null) sealed; :class:`KeyMissing` without keys."""
    present = [name for name in sensitive if values.get(name) is not None and not is_sealed(values[name])]
    if not present:
        return dict(values)
    if keys is None:
        raise KeyMissing(
            f"input fields {', '.join(present)} are sensitive and no key seals them: set INPUT_ENCRYPTION_KEY"
        )
    return {name: keys.seal(v, order_id, name) if name in present else v for name, v in values.items()}


def open_input(values: Mapping[str, Any], order_id: str, keys: Keyring | None) -> dict[str, Any]:
    """The input with every sealed value opened (a value in clear, from an older release, as it is);
    :class:`SealError` for one that does not open, or any sealed value without keys."""
    opened = dict(values)
    for name, value in values.items():
        if is_sealed(value):
            if keys is None:
                raise SealError(f"input field {name} is sealed and no key opens it: set INPUT_ENCRYPTION_KEY")
            opened[name] = keys.open(value, order_id, name)
    return opened


def redacted_input(
    values: Mapping[str, Any], sensitive: Mapping[str, str | None] | tuple[str, ...]
) -> dict[str, Any]:
    """The input as any read shows it: each sensitive value (and any sealed one) as
    :data:`engine.calls.REDACTED`; null and dropped values as they are."""
    return {
        name: REDACTED if value is not None and (name in sensitive or is_sealed(value)) else value
        for name, value in values.items()
    }


def unneeded(record: TaskRecord, workflow: WorkflowDefinition | None) -> list[str]:
    """The sensitive fields the record still holds that no remaining step or undo can need: one needed
    until a step, once that step is done (completed, left out) or the order is being undone (its forward
    steps never run again); any, once the order is finished."""
    if workflow is None:
        return []
    held = [name for name in workflow.sensitive if name in record.input]
    if not held:
        return []
    state = record.state
    if state.process_state.finished:
        return held
    positions = {step.name: index for index, step in enumerate(workflow.steps)}
    dropped = []
    for name in held:
        until = workflow.sensitive[name]
        if until is None:
            continue
        index = positions.get(until)
        done = index is not None and index < len(record.steps) and record.steps[index].status in _DONE
        if done or state.phase is Phase.COMPENSATE:
            dropped.append(name)
    return dropped


def settle_input(record: TaskRecord, workflow: WorkflowDefinition | None, keys: Keyring | None) -> None:
    """Remove what :func:`unneeded` names from the record's input, and seal a sensitive value an older
    release stored in clear (with ``keys``): the store writes the input again with the same save, in the
    same transaction. Nothing changes (and nothing is written) when there is nothing to do."""
    if workflow is None or not workflow.sensitive:
        return
    names = unneeded(record, workflow)
    values = {k: v for k, v in record.input.items() if k not in names}
    if keys is not None:
        values = seal_input(values, workflow.sensitive, record.order_id, keys)
    if values != record.input:
        record.change_input(values)
