"""The invariants checked once a run has settled (see :mod:`simulation.oracle` for the list), read from the
simulated tables, the services' ledger and the broker directly: nothing here goes through the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.state import ProcessState, StepStatus, TaskState

from . import liveness
from .store import FINISHED, TALLY, Archived, AuditRow, HistoryListing, InputRow, LiveState, Tombstone

if TYPE_CHECKING:
    from .run import Simulation

_UNCHANGED_OK = ("cancel",)  # answered as done when already under way (nothing saved, nothing audited)


def _final_states(sim: Simulation) -> dict[str, tuple[str, TaskState | None, Any]]:
    """Each order's end: ("live", state, LiveState) / ("history", state, Archived) / ("purged", None,
    Tombstone)."""
    found: dict[str, tuple[str, TaskState | None, Any]] = {}
    for _, _, row in sim.tables.table("orders").rows():
        if isinstance(row.value, LiveState):
            found[row.value.state.order_id] = ("live", row.value.state, row.value)
    for _, _, row in sim.tables.table("ordershistory").rows():
        value = row.value
        if isinstance(value, Archived):
            order_id = value.state.order_id
            if order_id in found:
                sim.oracle.violation(order_id, "the order is both live and in the history")
            else:
                found[order_id] = ("history", value.state, value)
        elif isinstance(value, Tombstone) and value.order_id not in found:
            found[value.order_id] = ("purged", None, value)
    return found


def final(sim: Simulation) -> None:
    """Every end-of-run invariant."""
    oracle = sim.oracle
    ends = _final_states(sim)
    deadline = sim.quiet_at + sim.bound
    for order_id, truth in oracle.orders.items():
        end = ends.get(order_id)
        if truth.created == 0 or truth.state is None:
            oracle.violation(order_id, "the order was never created")
            continue
        if truth.created > 1:
            oracle.violation(order_id, f"the order was started {truth.created} times")
        # Gone entirely: purged after the retention period, and its tombstone dropped too.
        where, state, value = end if end is not None else ("purged", None, None)
        final_name = truth.state.value
        if state is not None and state.process_state is not truth.state:
            oracle.violation(
                order_id, f"the store holds {state.process_state.value}, its last save {final_name}"
            )
        if truth.state is None or not truth.state.terminal:
            oracle.violation(
                order_id, f"not terminal {sim.bound:.0f} s after the faults stopped: {final_name}"
            )
            continue
        if truth.terminal_at is not None and truth.terminal_at > deadline:
            oracle.violation(
                order_id, f"terminal only at {truth.terminal_at:.1f}, after the bound {deadline:.1f}"
            )
        if where == "live":
            assert state is not None
            if state.hold_end is not None:
                oracle.violation(order_id, "a terminal order is still held")
        if truth.alert_owed:
            oracle.violation(order_id, "entered Error, and no alert was raised")
        _ledger(sim, order_id, final_name, value)
        _audit(sim, order_id, where)
    _records(sim)
    _messages(sim)
    liveness.final(sim)


def _ledger(sim: Simulation, order_id: str, final_name: str, value: Any) -> None:
    oracle = sim.oracle
    truth = oracle.orders[order_id]
    steps = list(value.steps) if isinstance(value, Archived) else None
    if steps is None and isinstance(value, LiveState):
        table = sim.tables.table("orders")
        rows = table.range(_pk(sim, order_id), f"order|{order_id}|step|", f"order|{order_id}|step|~")
        steps = [row.value for _, row in rows]
    keys = {f"{order_id}:{name}": index for index, name in enumerate(truth.steps)}
    for effect in truth.effects:
        if effect.applies > 1:
            oracle.violation(order_id, f"{effect.key} was applied {effect.applies} times")
        if effect.key not in keys or keys[effect.key] != effect.step_index:
            oracle.violation(order_id, f"an effect under {effect.key}, the key of no step of the order")
    effects = {e.step_index: e for e in truth.effects}
    if final_name == ProcessState.PROCESSED.value:
        for index, name in enumerate(truth.steps):
            found = effects.get(index)
            skipped = index in truth.skipped
            if found is not None and found.compensated_at is not None:
                oracle.violation(order_id, f"Processed, but {name} was undone")
            elif found is None and not skipped:
                oracle.violation(order_id, f"Processed, but {name} was never applied")
    elif final_name == ProcessState.COMPENSATED.value:
        for effect in truth.effects:
            if effect.compensated_at is None:
                oracle.violation(order_id, f"Compensated, but {effect.key} is still applied")
    if steps is not None and final_name in (ProcessState.PROCESSED.value, ProcessState.COMPENSATED.value):
        want = StepStatus.COMPLETED if final_name == ProcessState.PROCESSED.value else None
        for step in steps:
            if want is not None and step.status is not want:
                oracle.violation(order_id, f"Processed with step {step.name} {step.status.value}")


def _pk(sim: Simulation, order_id: str) -> str:
    from .store import shard_of

    return shard_of(order_id, 8)


def _audit(sim: Simulation, order_id: str, where: str) -> None:
    """The audit trail holds every operator action answered as done, no action that was refused, and one
    "error" entry per entry into Error (a purged order's trail is gone with it)."""
    oracle = sim.oracle
    truth = oracle.orders[order_id]
    if where == "purged":
        return
    table = sim.tables.table("orders" if where == "live" else "ordershistory")
    prefix = f"audit|{order_id}|"
    entries = [row.value.entry for _, row in table.range(_pk(sim, order_id), prefix, prefix + "~")]
    counted: dict[str, int] = {}
    for entry in entries:
        counted[entry.action] = counted.get(entry.action, 0) + 1
    if counted.get("error", 0) != truth.errors:
        oracle.violation(
            order_id, f"{counted.get('error', 0)} error audit entries for {truth.errors} entries into Error"
        )
    for action in set(counted) | set(truth.operator_done):
        if action == "error":
            continue
        done = truth.operator_done.get(action, 0)
        unsure = truth.operator_unsure.get(action, 0)
        audited = counted.get(action, 0)
        low = 0 if action in _UNCHANGED_OK else done
        if not low <= audited <= done + unsure:
            oracle.violation(
                order_id,
                f"{audited} {action} audit entries for {done} answered as done ({unsure} unanswered)",
            )


def _records(sim: Simulation) -> None:
    """No record outlives its order."""
    oracle = sim.oracle
    for _, order_id, row in sim.tables.table("orderswatch").rows():
        oracle.violation(order_id, f"a watch entry ({row.value}) outlived the run's work")
    live: dict[str, dict[str, Any]] = {}
    listings: dict[str, list[tuple[str, TaskState]]] = {}
    audits: dict[str, int] = {}
    for _, rk, row in sim.tables.table("orders").rows():
        value = row.value
        if isinstance(value, LiveState | InputRow):
            order_id = rk.split("|")[1]
            live.setdefault(order_id, {})[type(value).__name__] = value
        elif isinstance(value, TaskState):
            listings.setdefault(value.order_id, []).append((rk, value))
        elif isinstance(value, AuditRow):
            audits[value.order_id] = audits.get(value.order_id, 0) + 1
        elif rk.startswith("order|"):
            order_id = rk.split("|")[1]
            live.setdefault(order_id, {}).setdefault("steps", 0)
            live[order_id]["steps"] += 1
    for order_id, parts in live.items():
        state_row = parts.get("LiveState")
        if state_row is None or "InputRow" not in parts:
            oracle.violation(order_id, f"live records without their task: {sorted(parts)}")
            continue
        truth = oracle.orders.get(order_id)
        if truth is not None and parts.get("steps", 0) != len(truth.steps):
            oracle.violation(order_id, f"{parts.get('steps', 0)} step records for {len(truth.steps)} steps")
        entries = listings.pop(order_id, [])
        if len(entries) != 1 or entries[0][0] != state_row.index_key:
            oracle.violation(order_id, f"listing entries {[k for k, _ in entries]} for {state_row.index_key}")
        elif entries[0][1].process_state is not state_row.state.process_state:
            oracle.violation(order_id, "the listing entry names another state than the task's")
        if state_row.state.process_state.finished:
            oracle.violation(order_id, "a finished order was never moved to the history")
    for order_id, entries in listings.items():
        oracle.violation(order_id, f"listing entries {[k for k, _ in entries]} of no live task")
    for order_id, n in audits.items():
        if order_id not in live:
            oracle.violation(order_id, f"{n} audit entries left in the live table after the order left it")
    _history(sim)


def _history(sim: Simulation) -> None:
    oracle = sim.oracle
    table = sim.tables.table("ordershistory")
    for pk in table.partitions():
        archived: dict[str, int] = {s.value: 0 for s in FINISHED}
        listed: dict[str, str] = {}
        tombstones: dict[str, Tombstone] = {}
        gone: dict[str, str] = {}
        tally: dict[str, int] | None = None
        for _, rk, row in table.rows(pk):
            value = row.value
            if isinstance(value, Archived):
                archived[value.state.process_state.value] += 1
                listed.setdefault(value.state.order_id, "")
                if table.get(pk, value.index_key) is None:
                    oracle.violation(value.state.order_id, "archived without its listing entry")
            elif isinstance(value, HistoryListing):
                listed[value.state.order_id] = rk
            elif isinstance(value, Tombstone):
                tombstones[value.order_id] = value
            elif rk == TALLY:
                tally = value
            elif rk.startswith("gone|"):
                gone[rk] = value
        if tally is not None and tally != archived:
            oracle.violation("", f"shard {pk}: the tally says {tally}, the history holds {archived}")
        for order_id, stone in tombstones.items():
            if stone.gone_key not in gone:
                oracle.violation(order_id, "a tombstone without its gone entry")
        for key, order_id in gone.items():
            if order_id not in tombstones:
                oracle.violation(order_id, f"a gone entry {key} without its tombstone")


def _messages(sim: Simulation) -> None:
    for message in sim.bus.unsettled():
        sim.oracle.violation(
            message.correlation_id,
            f"message {message.message_id} on {message.queue} never settled ({message.state})",
        )


def stats(sim: Simulation) -> dict[str, Any]:
    """Counts that say what a run exercised."""
    oracle, bus = sim.oracle, sim.bus
    fates: dict[str, int] = {}
    for message in bus.messages:
        fates[message.state] = fates.get(message.state, 0) + 1
    effects = list(sim.services.ledger.values())
    missing_alerts = sum(max(t.errors - t.alerts, 0) for t in oracle.orders.values())
    extra_alerts = sum(max(t.alerts - t.errors, 0) for t in oracle.orders.values()) + oracle.alerts_unmatched
    return {
        "crashes": sim.world.crashes,
        "store_errors": sim.world.store_errors,
        "messages": fates,
        "redeliveries": bus.redeliveries,
        "duplicates_dropped": bus.duplicates_dropped,
        "dead_letters": dict(oracle.dead_letters),
        "service_calls": sim.services.calls,
        "late_landings": sum(e.late_landings for e in effects),
        "undone_before_applied": sum(e.undone_before_applied for e in effects),
        "watch_entries_created": dict(oracle.watch_created),
        "sweeps": sim.timers.sweeps,
        "missing_alerts": missing_alerts,
        "extra_alerts": extra_alerts,
        "errors": sum(t.errors for t in oracle.orders.values()),
        **oracle.counts,
    }
