"""The invariants checked once a run has settled (see :mod:`simulation.oracle` for the list), read from the
simulated tables, the services' ledger and the broker directly: nothing here goes through the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.messages import CommandKind, SchedulerCommand, StatusEvent
from engine.state import ProcessState, StepStatus, TaskState

from .oracle import ENGINE_ENTRIES, settled_ledger, settled_liveness, settled_parking, settled_traces
from .tables import Row

if TYPE_CHECKING:
    from .run import Simulation

FINISHED = tuple(state for state in ProcessState if state.finished)
TALLY = "count"  # a history shard's tally of its finished tasks
_UNCHANGED_OK = ("cancel",)  # answered as done when already under way (nothing saved, nothing audited)


def _final_states(sim: Simulation) -> dict[str, tuple[str, TaskState | None, Row | None]]:
    """Each order's end: ("live", state, its state record) / ("history", state, the history's task) /
    ("purged", None, its tombstone)."""
    storage = sim.storage
    found: dict[str, tuple[str, TaskState | None, Row | None]] = {}
    for _, _, row in storage.live.rows():
        if row.props.get("Kind") == "state":
            state = storage.state(row)
            found[state.order_id] = ("live", state, row)
    for _, _, row in storage.history.rows():
        kind = row.props.get("Kind")
        if kind == "archive":
            state = storage.state(row)
            if state.order_id in found:
                sim.oracle.violation(state.order_id, "the order is both live and in the history")
            else:
                found[state.order_id] = ("history", state, row)
        elif kind == "tombstone" and row.props["OrderID"] not in found:
            found[row.props["OrderID"]] = ("purged", None, row)
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
        where, state, row = end if end is not None else ("purged", None, None)
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
        if where == "live" and state is not None and state.hold_end is not None:
            oracle.violation(order_id, "a terminal order is still held")
        if truth.alert_owed:
            oracle.violation(order_id, "entered Error, and no alert was raised")
        settled_ledger(oracle, sim.storage, sim.services.ledger, order_id, final_name, where, row)
        _audit(sim, order_id, where)
    _records(sim)
    settled_parking(oracle, sim.storage)
    _messages(sim)
    if sim.searches is not None:
        sim.searches.final()
        _statuses(sim)
    settled_liveness(oracle)
    _calls(sim, ends)
    settled_traces(oracle, sim.spans, ends)


def _calls(sim: Simulation, ends: dict[str, tuple[str, TaskState | None, Row | None]]) -> None:
    """What the steps' records say of their calls (``engine.calls``) agrees with how they ended: in a
    Processed order, every step its service applied records a call of its last attempt that succeeded; in a
    Compensated one, every step undone records an undo of its last undo attempt that succeeded; every
    record's attempts are in order, none beyond the step's own count, none ending before it was sent.
    Checked after every other invariant, so that a bug they catch is named by them first."""
    oracle = sim.oracle
    for order_id, (where, state, row) in ends.items():
        truth = oracle.orders.get(order_id)
        if truth is None or state is None or row is None:
            continue
        if where == "history":
            steps = sim.storage.archived(row).steps
        else:
            prefix = f"order|{order_id}|step|"
            steps = [
                sim.storage.step(r)
                for _, r in sim.storage.live.scan(sim.storage.pk(order_id), prefix, prefix + "~")
            ]
        for step in steps:
            for kind, count in (("call", step.attempts), ("undo", step.compensation_attempts)):
                entries = [e for e in step.calls if e.kind == kind]
                attempts = [e.attempt for e in entries]
                if attempts != sorted(set(attempts)) or any(a > count for a in attempts):
                    oracle.violation(order_id, f"{step.name} records {kind} attempts {attempts} of {count}")
            if any(e.ended is not None and e.ended < e.dispatched for e in step.calls):
                oracle.violation(order_id, f"{step.name} records a dispatch that ended before it was sent")
            if (
                step.index in truth.skipped
                or step.index in truth.left_out
                or truth.waits[step.index] is not None
            ):
                continue
            wanted = None
            if state.process_state is ProcessState.PROCESSED and step.status is StepStatus.COMPLETED:
                wanted = ("call", step.attempts)
            elif state.process_state is ProcessState.COMPENSATED and step.status is StepStatus.COMPENSATED:
                wanted = ("undo", step.compensation_attempts)
            if wanted is None:
                continue
            last = next((e for e in reversed(step.calls) if e.kind == wanted[0]), None)
            if last is None or last.attempt != wanted[1] or last.outcome != "succeeded":
                oracle.violation(
                    order_id,
                    f"{step.name} is {step.status.value}, but its records show no {wanted[0]} of attempt "
                    f"{wanted[1]} that succeeded: {last}",
                )
            else:
                oracle.count("calls recorded as they ended")


def _audit(sim: Simulation, order_id: str, where: str) -> None:
    """The audit trail holds every operator action answered as done, no action that was refused, one
    "error" entry per entry into Error and one "left out" entry per step left out (a purged order's trail
    is gone with it)."""
    oracle = sim.oracle
    truth = oracle.orders[order_id]
    if where == "purged":
        return
    storage = sim.storage
    table = storage.live if where == "live" else storage.history
    prefix = f"audit|{order_id}|"
    entries = [storage.audit_entry(row) for _, row in table.scan(storage.pk(order_id), prefix, prefix + "~")]
    counted: dict[str, int] = {}
    for entry in entries:
        counted[entry.action] = counted.get(entry.action, 0) + 1
    if counted.get("error", 0) != truth.errors:
        oracle.violation(
            order_id, f"{counted.get('error', 0)} error audit entries for {truth.errors} entries into Error"
        )
    audited, left_out = counted.get("left out", 0), len(truth.left_out)
    if audited != left_out:
        oracle.violation(order_id, f"{audited} left out audit entries for {left_out} steps left out")
    for action in set(counted) | set(truth.operator_done):
        if action in ENGINE_ENTRIES:
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
    oracle, storage = sim.oracle, sim.storage
    for _, order_id, row in storage.watch.rows():
        oracle.violation(order_id, f"a watch entry ({row.props.get('CompleteBy')}) outlived the run's work")
    live: dict[str, dict[str, Any]] = {}
    listings: dict[str, list[tuple[str, TaskState]]] = {}
    audits: dict[str, int] = {}
    for pk, rk, row in storage.live.rows():
        if not pk.startswith("s"):  # the breakers' partition
            continue
        kind = row.props.get("Kind")
        order_id = row.props.get("OrderID", rk)
        if kind in ("state", "input"):
            live.setdefault(order_id, {})[kind] = row
        elif kind == "index":
            listings.setdefault(order_id, []).append((rk, storage.state(row)))
        elif kind == "audit":
            audits[order_id] = audits.get(order_id, 0) + 1
        elif kind == "step":
            parts = live.setdefault(order_id, {})
            parts["steps"] = parts.get("steps", 0) + 1
        else:
            oracle.violation(order_id, f"a live record of no known kind: {rk}")
    for order_id, parts in live.items():
        state_row = parts.get("state")
        if state_row is None or "input" not in parts:
            oracle.violation(order_id, f"live records without their task: {sorted(parts)}")
            continue
        state = storage.state(state_row)
        truth = oracle.orders.get(order_id)
        if truth is not None and parts.get("steps", 0) != len(truth.steps):
            oracle.violation(order_id, f"{parts.get('steps', 0)} step records for {len(truth.steps)} steps")
        entries = listings.pop(order_id, [])
        index_key = state_row.props.get("IndexKey")
        if len(entries) != 1 or entries[0][0] != index_key:
            oracle.violation(order_id, f"listing entries {[k for k, _ in entries]} for {index_key}")
        elif entries[0][1].process_state is not state.process_state:
            oracle.violation(order_id, "the listing entry names another state than the task's")
        if state.process_state.finished:
            oracle.violation(order_id, "a finished order was never moved to the history")
    for order_id, entries in listings.items():
        oracle.violation(order_id, f"listing entries {[k for k, _ in entries]} of no live task")
    for order_id, n in audits.items():
        if order_id not in live:
            oracle.violation(order_id, f"{n} audit entries left in the live table after the order left it")
    _history(sim)


def _history(sim: Simulation) -> None:
    oracle, table = sim.oracle, sim.storage.history
    for pk in table.partitions():
        archived: dict[str, int] = {s.value: 0 for s in FINISHED}
        tombstones: dict[str, str] = {}  # order id -> its gone entry's key
        gone: dict[str, str] = {}  # gone entry's key -> order id
        tally: dict[str, int] | None = None
        for _, rk, row in table.rows(pk):
            props = row.props
            kind = props.get("Kind")
            if kind == "archive":
                archived[props["ProcessState"]] += 1
                if table.get(pk, props["IndexKey"]) is None:
                    oracle.violation(props["OrderID"], "archived without its listing entry")
            elif kind == "tombstone":
                tombstones[props["OrderID"]] = props["GoneKey"]
            elif rk == TALLY:
                tally = {s.value: int(props.get(s.value, 0)) for s in FINISHED}
            elif rk.startswith("gone|"):
                gone[rk] = props["OrderID"]
        if tally is not None and tally != archived:
            oracle.violation("", f"shard {pk}: the tally says {tally}, the history holds {archived}")
        for order_id, key in tombstones.items():
            if key not in gone:
                oracle.violation(order_id, "a tombstone without its gone entry")
        for key, order_id in gone.items():
            if order_id not in tombstones:
                oracle.violation(order_id, f"a gone entry {key} without its tombstone")


# The status event an order's end is reported by.
_FINAL_EVENT = {
    ProcessState.PROCESSED: StatusEvent.PROCESSED.value,
    ProcessState.COMPENSATED: StatusEvent.COMPENSATED.value,
    ProcessState.ERROR: StatusEvent.ERROR.value,
}


def _statuses(sim: Simulation) -> None:
    """Each order's own status queue (its storefront's, or the shared one) received its final status at
    least once: always when it became terminal after the faults stopped (a process that dies between the
    save and the send loses the message before; counted)."""
    oracle = sim.oracle
    for order_id, truth in oracle.orders.items():
        event = _FINAL_EVENT.get(truth.state) if truth.state is not None else None
        if event is None or event in truth.statuses:
            continue
        if truth.terminal_at is not None and truth.terminal_at >= sim.quiet_at:
            oracle.violation(
                order_id,
                f"{truth.state.value if truth.state else '-'}, but its status queue never received "
                f"{event} (each order's final status at least once)",
            )
        else:
            oracle.count("final statuses lost to a fault")


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
    wakes_again = 0  # wake-ups delivered more than once (a lock lost, a completion that failed)
    for message in bus.messages:
        fates[message.state] = fates.get(message.state, 0) + 1
        body = message.body
        if message.deliveries > 1 and isinstance(body, SchedulerCommand) and body.kind is CommandKind.WAKE:
            wakes_again += 1
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
        "bodies_refused": sim.services.bodies_refused,
        "late_landings": sum(e.late_landings for e in effects),
        "undone_before_applied": sum(e.undone_before_applied for e in effects),
        "watch_entries_created": dict(oracle.watch_created),
        "sweeps": sim.timers.sweeps,
        "sweeps' orders parked": sim.timers.parked,
        "sweeps' orders promoted by the calendar": sim.timers.promoted,
        "missing_alerts": missing_alerts,
        "extra_alerts": extra_alerts,
        "errors": sum(t.errors for t in oracle.orders.values()),
        "wake-ups delivered early": bus.wakes_early,
        "wake-ups delivered late": bus.wakes_late,
        "wake-ups delivered more than once": wakes_again,
        **sim.services.counts,
        **sim.webhooks.counts,
        **oracle.counts,
    }
