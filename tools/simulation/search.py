"""The search entries (``engine.search``, written by ``TableStateStore.create``) and the searches support
staff make, checked against the simulation's own record of each order (its input, its storefront, where its
records are), never against what the store answers.

The invariants, each checked on the request that could break it (nothing scans the search table while the
run goes on):

- written at submission: when a submission writes a task, every entry the order is found by is there (one
  per searchable field of the input it was submitted with, its storefront, its workflow, its time of
  submission), carrying what a search filters on (its id, submission time, workflow and version, storefront,
  the fields' values);
- kept while the order is: an entry is deleted only once its order (that submission of the id) is neither
  live, nor parked, nor in the history;
- purged with the order: once the run has settled, no entry is left of an order purged after the faults
  stopped by a clean-up run that ended (one a fault cut short between the purge and its entries' delete may
  leave them: counted, as are those of a submission that never wrote its task);
- a search answers only what matches: every order a search returns has the searched value in the input
  its client submitted, and the storefront and workflow asked for, once each; and it finds every order that
  matches, live, parked or in the history, that stayed in one place while the search ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from adapters.table_store import _stamp
from engine.errors import EngineError
from engine.ports import Page
from engine.search import SearchQuery, key_value
from engine.state import TaskState

from .actors import FIELD, Host, in_process
from .tables import Change, Row
from .world import Crash, StoreUnavailable

if TYPE_CHECKING:
    from .run import Simulation


def field_values(searchable: tuple[str, ...], document: dict[str, Any]) -> dict[str, str]:
    """The values a search finds an order by, from the input its client submitted: its declared searchable
    fields that hold text, a whole number or a flag (a flag as ``true``/``false``)."""
    found: dict[str, str] = {}
    for name in searchable:
        value = document.get(name)
        if isinstance(value, bool):
            found[name] = "true" if value else "false"
        elif isinstance(value, str | int) and str(value):
            found[name] = str(value)
    return found


@dataclass
class _Purge:
    created_at: datetime
    at: float
    quiet: bool  # after the faults stopped


class SearchModel:
    """What the search table must hold, and the searches (see the module's docstring)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.storage = sim.storage
        self.oracle = sim.oracle
        self.moved_at: dict[str, float] = {}  # order -> when its records last changed place
        self.purges: dict[str, _Purge] = {}
        self.cleanups: list[tuple[float, float]] = []  # (start, end) of the clean-up runs that ended

    # ---- what the store writes ------------------------------------------------------------------------
    def expected(self, state: TaskState) -> dict[str, dict[str, Any]]:
        """The entries of a task, by key, each with what it must carry, from the oracle's own record."""
        truth = self.oracle.orders[state.order_id]
        definition = self.sim.catalog.find(truth.workflow, state.workflow_version)
        fields = field_values(definition.searchable if definition is not None else (), truth.input)
        carried: dict[str, Any] = {
            "OrderID": state.order_id,
            "CreatedAt": state.created_at,
            "Workflow": truth.workflow,
            "WorkflowVersion": state.workflow_version,
            "Submitter": truth.storefront,
            **{f"Q_{name}": value for name, value in fields.items()},
        }
        prefixes = [f"field|{name}|{key_value(value)}|" for name, value in sorted(fields.items())]
        if truth.storefront:
            prefixes.append(f"storefront|{key_value(truth.storefront)}|")
        prefixes += [f"workflow|{truth.workflow}|", "submitted|"]
        tail = f"{_stamp(state.created_at)}|{state.order_id}|"
        return {prefix + tail: carried for prefix in prefixes}

    def created(self, state: TaskState) -> None:
        """A submission wrote the task: every entry the order is found by is there, carrying its values; and
        the task is its storefront's own (its status queue named by it)."""
        oracle = self.oracle
        truth = oracle.orders.get(state.order_id)
        if truth is None:
            return  # the oracle reports a task no client submitted
        if truth.created_at is None or self.where(state.order_id, truth.created_at) is None:
            truth.created_at = state.created_at  # the task kept (a creation taken back leaves the first)
        if state.submitter != truth.storefront:
            oracle.violation(
                state.order_id,
                f"storefront ids stay apart: submitted by {truth.storefront or 'no storefront'}, the task "
                f"says {state.submitter or 'none'}",
            )
        pk = self.storage.pk(state.order_id)
        for key, carried in self.expected(state).items():
            row = self.storage.search.get(pk, key)
            if row is None:
                oracle.violation(
                    state.order_id,
                    f"written at submission: the task was written without its search entry {key}: a "
                    "search by it does not find the order",
                )
                return
            wrong = {name for name, value in carried.items() if row.props.get(name) != value}
            if wrong:
                oracle.violation(
                    state.order_id,
                    f"written at submission: its search entry {key} carries {sorted(wrong)} other than "
                    "submitted",
                )
                return

    def moved(self, order_id: str, now: str | None, before: Row | None) -> None:
        """Its records changed place (see :class:`simulation.storage.Places`)."""
        self.moved_at[order_id] = self.sim.loop.time()
        if now == "tombstone" and before is not None and before.props.get("Kind") == "archive":
            created = before.props.get("CreatedAt")
            if isinstance(created, datetime):
                at = self.sim.loop.time()
                self.purges[order_id] = _Purge(created, at, not self.sim.world.faults)

    def where(self, order_id: str, created_at: Any) -> str | None:
        """Where that submission of the order is: "live", "parked", "in the history", or None."""
        storage = self.storage
        pk = storage.pk(order_id)
        row = storage.live.get(pk, f"order|{order_id}|state")
        if row is not None and row.props.get("CreatedAt") == created_at:
            return "live"
        kept = storage.history.get(pk, f"order|{order_id}")
        if kept is not None and kept.props.get("CreatedAt") == created_at:
            kind = kept.props.get("Kind")
            return "parked" if kind == "parked" else "in the history" if kind == "archive" else None
        return None

    def search_changed(self, pk: str, changes: list[Change]) -> None:
        """An entry is deleted only once its order is nowhere."""
        for change in changes:
            if change.after is not None or change.before is None:
                continue
            order_id = str(change.before.props.get("OrderID"))
            place = self.where(order_id, change.before.props.get("CreatedAt"))
            if place is not None:
                self.oracle.violation(
                    order_id,
                    f"a search entry deleted while its order is {place}: {change.row_key} (a search by it no "
                    "longer finds the order)",
                )

    def cleanup_ended(self, started: float, ended: float) -> None:
        self.cleanups.append((started, ended))

    def final(self) -> None:
        """Once the run has settled: no entry outlives its order's purge."""
        oracle = self.oracle
        for _, _, row in self.storage.search.rows():
            order_id = str(row.props.get("OrderID"))
            created = row.props.get("CreatedAt")
            if self.where(order_id, created) is not None:
                continue
            purge = self.purges.get(order_id)
            if purge is None or purge.created_at != created:
                oracle.count("search entries of a submission that never wrote its task")
            elif purge.quiet and any(start <= purge.at <= end for start, end in self.cleanups):
                oracle.violation(
                    order_id,
                    f"a search entry outlived its order's purge ({purge.at:.3f}): {row.props.get('RowKey')}",
                )
            else:
                oracle.count("search entries left by a purge a fault cut short")

    # ---- the searches -----------------------------------------------------------------------------------
    async def search(self, order_id: str, storefront: bool, workflow: bool, page_size: int) -> None:
        """Support staff search for the customer of ``order_id`` (with its storefront, its workflow), a page
        at a time: every order answered matches; every order that matches and stayed put is found."""
        sim, oracle = self.sim, self.oracle
        truth = oracle.orders[order_id]
        value = truth.input.get(FIELD)
        if not isinstance(value, str):
            return
        query = SearchQuery(
            fields={FIELD: value},
            storefront=truth.storefront if storefront else None,
            workflow=truth.workflow if workflow else None,
        )
        started = sim.loop.time()
        found: list[TaskState] = []
        token: str | None = None
        for _ in range(1000):

            async def call(host: Host, asked: str | None = token) -> Page:
                return await host.tasks.search(query, page_size, asked)

            try:
                page = await in_process(sim, call)
            except (Crash, StoreUnavailable):
                oracle.count("searches that got no answer")
                return
            except (EngineError, ValueError, TypeError, KeyError, AttributeError) as exc:
                # Nothing a search is asked here is the caller's mistake: any refusal or fault is the store's.
                oracle.violation(order_id, f"a search by {FIELD} was refused: {type(exc).__name__} {exc}")
                return
            found += page.states
            token = page.continuation
            if token is None:
                break
        ended = sim.loop.time()
        oracle.count("searches")
        seen: set[str] = set()
        for state in found:
            other = oracle.orders.get(state.order_id)
            if (
                other is None
                or other.input.get(FIELD) != value
                or (query.storefront is not None and other.storefront != query.storefront)
                or (query.workflow is not None and other.workflow != query.workflow)
                or state.submitter != other.storefront
            ):
                oracle.violation(
                    state.order_id,
                    f"a search never answers an order that does not match: asked {query.fields} storefront "
                    f"{query.storefront} workflow {query.workflow}, answered {state.order_id} (storefront "
                    f"{state.submitter})",
                )
            if state.order_id in seen:
                oracle.violation(state.order_id, f"a search answered {state.order_id} twice")
            seen.add(state.order_id)
        for other in oracle.orders.values():
            if other.input.get(FIELD) != value or other.created_at is None:
                continue
            if (query.storefront is not None and other.storefront != query.storefront) or (
                query.workflow is not None and other.workflow != query.workflow
            ):
                continue
            place = self.where(other.order_id, other.created_at)
            if place is None or self.moved_at.get(other.order_id, 0.0) >= started:
                continue  # purged, or it changed place while the search ran
            if other.order_id not in seen:
                oracle.violation(
                    other.order_id,
                    f"a search by {FIELD}={value} did not find the order, {place} throughout "
                    f"({started:.3f}-{ended:.3f})",
                )
            else:
                oracle.count(f"searches found an order {place}")
