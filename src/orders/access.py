"""Who may do what: the roles, who is asking, and the check every route goes through.

Four roles. A storefront is a ``submitter``: it submits orders and reads an order by its id (the status
URL it was given). A ``reader`` reads everything (orders, counts, audit, breakers, dead letters, the
document, the console without its action buttons). An ``approver`` reads as a reader does and approves or
rejects the steps that wait for an approval, and nothing else. An ``operator`` does everything, the
actions included.
Each route says which of them may call it where it is declared (orders.routes), from the rules here
(:data:`READ`, :data:`OPERATE`, ...).

Who is asking, in the order checked:

- a principal signed in with Microsoft Entra ID through App Service authentication, with its app roles
  (``Orders.Operator``, ``Orders.Reader``). Its headers are believed only when the platform says its
  authentication is on (``WEBSITE_AUTH_ENABLED``): the platform then removes any the client sent and
  sets its own. With it off they are ignored, so a forged one earns a 401;
- a storefront's key (``STOREFRONT_<NAME>_KEY``, for each name in ``STOREFRONTS``) in ``x-functions-key``:
  worth the submitter role within that storefront only (its orders are its own: see
  :func:`engine.queues.scoped_id` and docs/operating.md, Storefronts);
- the shared submission key (``SUBMISSION_KEY``) in ``x-functions-key``: the submitter role, for orders
  that belong to no storefront (as every order did before storefronts were declared).

Which orders a caller sees is its :class:`Scope` (:attr:`Caller.scope`), decided here once for every route
that names an order or lists them: a storefront its own orders, by the ids it gave; a reading role
(reader, approver, operator) every order, a storefront's by its full name ``<storefront>.<id>``; anyone
else (the shared key, with or without a principal of no role) the orders of no storefront. An order
outside the scope is answered exactly as one that does not exist.

The app checks a key, not the Functions host: every route is anonymous at the host, because the host
takes no App Service session in place of a function key, and the submitter's two routes are also
people's, who sign in and hold no key. A key in the address (``?code=``) is not accepted: addresses end
up in logs.

``API_AUTH=open`` lets everyone do everything, as ``func start`` does locally; it is ignored on App
Service (``WEBSITE_INSTANCE_ID`` or ``WEBSITE_SITE_NAME`` set, outside Core Tools). No credential: 401;
a credential without the route's role: 403. Either way nothing else runs.
"""

from __future__ import annotations

import hmac
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, Literal

from engine import queues

from .identity import Principal, principal_of

log = logging.getLogger("orders.access")

KEY_HEADER = "x-functions-key"


class Role(StrEnum):
    """What a caller may do; a caller may hold several."""

    SUBMITTER = "submitter"
    READER = "reader"
    APPROVER = "approver"
    OPERATOR = "operator"


# Entra ID app roles of the app registration (infra/hooks/create-app-registration.sh) -> role.
APP_ROLES: Final = {
    "Orders.Operator": Role.OPERATOR,
    "Orders.Reader": Role.READER,
    "Orders.Approver": Role.APPROVER,
}

ANYONE: Final = "anyone"  # no credential needed (liveness only)
# No role: the request carries its own proof, checked by its handler (a service's signed callback).
SIGNED: Final = "signed"
Rule = frozenset[Role] | Literal["anyone", "signed"]

# Who may call a route: each route's rule is given where the route is declared (orders.routes).
SUBMIT: Final = frozenset({Role.SUBMITTER, Role.OPERATOR})
STOREFRONT_READ: Final = frozenset({Role.SUBMITTER, Role.READER, Role.APPROVER, Role.OPERATOR})
READ: Final = frozenset({Role.READER, Role.APPROVER, Role.OPERATOR})
APPROVE: Final = frozenset({Role.APPROVER, Role.OPERATOR})
OPERATE: Final = frozenset({Role.OPERATOR})


STOREFRONT_NAME = re.compile(rf"^{queues.SUBMITTER_PATTERN}$")


def storefront_key_setting(name: str) -> str:
    """The app setting that holds a storefront's key: ``STOREFRONT_<NAME>_KEY`` (``-`` as ``_``)."""
    return f"STOREFRONT_{name.upper().replace('-', '_')}_KEY"


def storefronts(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The declared storefronts (``STOREFRONTS``, comma-separated); ValueError naming a bad name."""
    names = tuple(n.strip() for n in environ.get("STOREFRONTS", "").split(",") if n.strip())
    for name in names:
        if not STOREFRONT_NAME.match(name):
            raise ValueError(
                f"STOREFRONTS: {name!r} is not a storefront name (a lower-case letter, then up to 23 "
                "lower-case letters, digits or hyphens, the last not a hyphen)"
            )
    if len(set(names)) != len(names):
        raise ValueError("STOREFRONTS names a storefront twice")
    return names


@dataclass(frozen=True)
class AccessSettings:
    """What the check trusts, from the app settings."""

    open: bool = False
    platform_authentication: bool = False
    submission_key: str | None = None
    # Each declared storefront's key, by name (a storefront without a key yet cannot sign in).
    storefront_keys: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> AccessSettings:
        """``API_AUTH``, ``WEBSITE_AUTH_ENABLED`` (set by App Service, never by this repository) and
        ``SUBMISSION_KEY``, ``STOREFRONTS`` and each storefront's ``STOREFRONT_<NAME>_KEY``."""
        env = os.environ if environ is None else environ
        # App Service names the site and the instance; Core Tools says it is Core Tools.
        on_app_service = bool(env.get("WEBSITE_INSTANCE_ID") or env.get("WEBSITE_SITE_NAME")) and (
            env.get("FUNCTIONS_CORETOOLS_ENVIRONMENT", "").lower() != "true"
        )
        wants_open = env.get("API_AUTH", "").strip().lower() == "open"
        if wants_open and on_app_service:
            log.error("API_AUTH=open is ignored on App Service: the roles are enforced")
        return cls(
            open=wants_open and not on_app_service,
            platform_authentication=env.get("WEBSITE_AUTH_ENABLED", "").strip().lower() == "true",
            submission_key=env.get("SUBMISSION_KEY") or None,
            storefront_keys={
                name: key for name in storefronts(env) if (key := env.get(storefront_key_setting(name)))
            },
        )


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: its roles and how the audit trail names it."""

    roles: frozenset[Role]
    actor: str
    principal: Principal | None = None
    # The storefront whose key it holds: its orders only (None: any order, as its roles allow).
    storefront: str | None = None

    @property
    def scope(self) -> Scope:
        """The orders it may see, whatever the route: the one rule (see :class:`Scope`)."""
        if self.storefront is not None:
            return Scope(storefront=self.storefront)
        if self.roles & READ:
            return EVERY_ORDER
        return NO_STOREFRONT


# An order id as a client gives it (no storefront in it), and a task id: an order id or <storefront>.<id>.
_ORDER_ID = re.compile(queues.ORDER_ID_PATTERN)
_TASK_ID = re.compile(queues.TASK_ID_PATTERN)


@dataclass(frozen=True)
class Scope:
    """Which orders a caller sees, and by which id. Three kinds: one storefront's orders, by the ids it
    gave (``storefront``); every order, a storefront's by its full name (``everything``); or, with
    neither, the orders of no storefront (the shared submission key's).

    An id outside the scope names no order (:meth:`task_id` is None, or :meth:`sees` refuses the order
    read): the caller gets the answer of an order that does not exist, so it learns nothing of it.
    """

    storefront: str | None = None
    everything: bool = False

    def task_id(self, order_id: str) -> str | None:
        """The task ``order_id`` names in this scope; None for an id that can name none here (another
        storefront's full name, an id that is no id, a full name to a caller that reads no storefront's)."""
        if self.storefront is not None:
            return queues.scoped_id(order_id, self.storefront) if _ORDER_ID.fullmatch(order_id) else None
        return order_id if (_TASK_ID if self.everything else _ORDER_ID).fullmatch(order_id) else None

    def sees(self, submitter: str | None) -> bool:
        """Whether an order of ``submitter`` (its storefront, None for none) is in this scope."""
        return self.everything or submitter == self.storefront


EVERY_ORDER: Final = Scope(everything=True)
NO_STOREFRONT: Final = Scope()


def _same(supplied: str, key: str) -> bool:
    # Constant time: how long a comparison takes must not tell how much of a guess was right.
    return hmac.compare_digest(supplied.encode(), key.encode())


def authenticate(headers: Mapping[str, str], settings: AccessSettings) -> Caller | None:
    """Who sent a request with these headers (names in lower case); None: no valid credential."""
    if settings.open:
        return Caller(frozenset(Role), "local")
    principal = principal_of(headers) if settings.platform_authentication else None
    supplied = headers.get(KEY_HEADER)
    if supplied and principal is None:
        # Every key is compared (in constant time), so how long this takes says nothing of which matched.
        matched = [name for name, key in settings.storefront_keys.items() if _same(supplied, key)]
        if matched:
            return Caller(frozenset({Role.SUBMITTER}), f"storefront:{matched[0]}", storefront=matched[0])
    keyed = bool(supplied and settings.submission_key and _same(supplied, settings.submission_key))
    if principal is None and not keyed:
        return None
    roles = {APP_ROLES[r] for r in principal.app_roles if r in APP_ROLES} if principal else set()
    if keyed:
        roles.add(Role.SUBMITTER)
    actor = principal.actor if principal else "key:submission"
    return Caller(frozenset(roles), actor, principal)


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: a status (401 or 403), an error code and a message."""

    status: int
    code: str
    message: str


def check(allowed: Rule, caller: Caller | None) -> Refusal | None:
    """None if ``caller`` may call a route with rule ``allowed``, else the refusal."""
    if isinstance(allowed, str):  # anyone, or a signed request its handler checks
        return None
    if caller is None:
        return Refusal(
            401,
            "Unauthorized",
            f"sign in with Microsoft Entra ID (/.auth/login/aad), or send your key in {KEY_HEADER}",
        )
    if caller.roles & allowed:
        return None
    needed = " or ".join(sorted(allowed))
    held = ", ".join(sorted(caller.roles)) or "no role of this app"
    return Refusal(403, "Forbidden", f"this needs the role {needed}; you have {held}")
