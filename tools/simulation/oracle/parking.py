"""Parked orders (the invariants' list: :mod:`simulation.oracle`; the history table's changes,
:class:`simulation.storage.Storage`): a park or a return is no change of the order's state, and its last save
left it in the state it was parked in; once the run has settled (:func:`settled_parking`) no parked copy
remains but a stale one beside a live order, and each shard's waiting tally counts its parked copies."""

from __future__ import annotations

from engine.state import TaskState

from ..storage import CALENDAR, Storage
from .core import OracleCore


class Parking(OracleCore):
    """The invariants of parked orders, as the store parks and returns them."""

    def parked(self, order_id: str, state: TaskState) -> None:
        """The order's live records went, its parked copy written before (not a change of its state)."""
        truth = self.orders.get(order_id)
        self.count("orders parked")
        if truth is None:
            self.violation(order_id, "a task the client never submitted was parked")
            return
        truth.parks += 1
        if truth.state is not state.process_state:
            self.violation(
                order_id,
                f"parked as {state.process_state.value}, but its last save left it {truth.state}",
            )
        self.note(order_id, "parked waiting for {} until {}", state.waiting_for, state.wait_until)

    def returned(self, order_id: str, how: str) -> None:
        """The order's live records were written again from its parked copy (its change follows)."""
        self.count("parked orders returned")
        self.count(f"parked orders returned {how}")
        self.note(order_id, "returned from its parked copy {}", how)


def settled_parking(oracle: OracleCore, storage: Storage) -> None:
    """Once every order is terminal and moved to the history, no parked copy remains (one beside an order
    still live, in Error, is a stale copy a return left: counted), each shard's waiting tally counts its
    parked copies."""
    for pk in storage.history.partitions():
        if pk == CALENDAR:  # entries of orders that came back before their time are dropped when due
            continue
        copies: dict[str, int] = {}
        for rk, row in storage.history.scan(pk, "order|", "order|~"):
            if row.props.get("Kind") != "parked":
                continue
            order_id = rk.removeprefix("order|")
            kind = str(row.props.get("WaitingFor"))
            copies[kind] = copies.get(kind, 0) + 1
            if storage.is_live(order_id):
                oracle.count("stale parked copies left beside a live order")
            else:
                oracle.violation(order_id, "a parked copy outlived the run (the order is not live)")
        tally = storage.waiting_tally(pk)
        if {k: n for k, n in copies.items() if n} != {k: n for k, n in tally.items() if n}:
            oracle.violation(
                "", f"shard {pk}: the waiting tally says {tally}, the parked copies are {copies}"
            )
