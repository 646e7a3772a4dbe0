"""The ledger check: do the simulators' ledger and the orders' final states agree?

An order says which workflow and version it ran, and its steps by name, state and result
(``GET /api/orders/{id}``); the catalog says which service runs each step and which steps cannot be undone
(no compensation: their resource declares no undo, so their simulator has no undo route); the Agent
sends a step's effect to that service under the idempotency key ``<orderId>:<stepName>``, in the order's
trace (its ``traceId``: each call's ``traceparent`` header names it). The ledger holds, per key, whether
the effect is applied and undone, the result values the service answered, the declared result values each
call's body carried, where each change stands in the ledger's order of changes, and the distinct trace ids
the calls came in (``traceIds``). So, for every finished order:

- a step left out by its condition (state ``LeftOut``) was never called: no effect under its key;
- Processed: every other step's effect is in its service's ledger under its key, applied and not undone;
- Compensated: every step that can be undone is undone or was never applied; a step that cannot be undone
  may stay applied (once: one key, one effect), and then it was applied before the order's first undo
  landed, since nothing is undone while such a step runs;
- a step that cannot be undone is never undone, whatever the order's state;
- either way, the ledger holds no effect of the order under any other key (a second effect of one step,
  made under another key, would be a double charge that no compensation knows of);
- results passed on: every value a call of the order carried under a result name that an earlier step of
  its workflow returns (for an undo, that step or an earlier one; for a step of a group, a step before the
  group: the steps of a group run side by side, reading none of each other's results) equals the value
  that step's effect returned, as recorded with the effect (e.g. every refund names the charge it
  refunds); a call that carried the field empty although the order held the value then (the step's
  result in the order) lost it; and each step's result as the order holds it is what its service
  returned;
- calls shown: every call the order's steps record as answered (applied, accepted, or undone) shows the
  body its service received under the step's key, field for field, but for the fields its body model
  declares sensitive, which show ``[redacted]`` and never their value;
- calls in the order's trace: every trace id a step's effect recorded (its applies, replays, and undos,
  the ledger keeping a few distinct ones) is the order's. Not checked for an order without a trace id (it
  was not traced) or an effect that recorded none (its calls came without the header, or an older ledger).

Orders in Error are not checked: they wait for an operator with whatever they had done. The demo and the
end-to-end tests both run this check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine import StepDefinition, WorkflowCatalog, WorkflowDefinition
from orders.catalog import CATALOG, SERVICES
from orders.services.declaration import ServiceDefinition

Ledger = Mapping[str, Mapping[str, Mapping[str, Any]]]  # GET /ledger: service -> key -> entry
CHECKED = ("Processed", "Compensated")
LEFT_OUT = "LeftOut"


def idempotency_key(order_id: str, step: str) -> str:
    """The key a step's effect is applied under (the engine's: the same on every attempt)."""
    return f"{order_id}:{step}"


@dataclass
class LedgerReport:
    """What the check found: the problems (none: it passed) and how much of each rule it could apply."""

    problems: list[str] = field(default_factory=list)
    orders: int = 0  # orders checked (Processed or Compensated)
    left_out: int = 0  # steps left out by their condition, none of them called
    kept: int = 0  # effects that cannot be undone left applied in Compensated orders
    ordered: int = 0  # of those, how many the ledger's order of changes showed applied before any undo
    carrying: int = 0  # calls (applies and undos) whose body carried a value an earlier step returned
    checked: int = 0  # values carried, each compared with the value its step returned
    waits: int = 0  # wait steps (timers, approvals) checked: no later step called after one ended badly
    calls: int = 0  # calls whose recorded body was compared with the body their service received
    redacted: int = 0  # of their fields, those declared sensitive, shown redacted
    traced: int = 0  # effects whose calls' trace ids were compared with their order's trace id

    def summary(self) -> str:
        """The counts in words, for the demo's output."""
        return (
            f"{self.orders} orders checked; {self.left_out} steps left out by their condition, none called; "
            f"{self.kept} effects that cannot be undone left applied in Compensated orders "
            f"({self.ordered} of them seen applied before the order's first undo); {self.waits} waits, none "
            f"passed by a later step after ending badly; {self.carrying} calls "
            f"carried values passed on, {self.checked} values checked against the values returned; "
            f"{self.calls} recorded calls showed the bodies their services received ({self.redacted} "
            f"sensitive fields redacted); {self.traced} effects' calls came in their order's trace"
        )


@dataclass(frozen=True)
class _Step:
    """One step of one order: its definition, its view in the order, and its effect in the ledger."""

    index: int
    definition: StepDefinition
    view: Mapping[str, Any]
    entry: Mapping[str, Any] | None

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def left_out(self) -> bool:
        return self.view.get("state") == LEFT_OUT

    @property
    def returned(self) -> Mapping[str, Any]:
        """What its service returned when applying it, as the ledger recorded it (nothing if unknown)."""
        result = self.entry.get("result") if self.entry is not None else None
        return result if isinstance(result, Mapping) else {}

    @property
    def held(self) -> Mapping[str, Any]:
        """What the order holds as its result (nothing if the view does not say)."""
        result = self.view.get("result")
        return result if isinstance(result, Mapping) else {}


def check_ledger(
    orders: Iterable[Mapping[str, Any]],
    ledger: Ledger,
    catalog: WorkflowCatalog = CATALOG,
    services: Iterable[ServiceDefinition] = SERVICES,
) -> list[str]:
    """What is wrong, one line per problem (none: the check passed); see :func:`ledger_report`."""
    return ledger_report(orders, ledger, catalog, services).problems


def ledger_report(
    orders: Iterable[Mapping[str, Any]],
    ledger: Ledger,
    catalog: WorkflowCatalog = CATALOG,
    services: Iterable[ServiceDefinition] = SERVICES,
) -> LedgerReport:
    """Check every finished order against the ledger and count what was checked.

    ``orders`` are order bodies as ``GET /api/orders/{id}`` answers them; orders not Processed or
    Compensated are skipped. ``ledger`` is the simulators' ``GET /ledger``. ``services`` declare the
    result names each step returns (a step on a service not among them returns none).
    """
    by_order: dict[str, dict[tuple[str, str], Mapping[str, Any]]] = {}
    for service, by_key in ledger.items():
        for key, applied in by_key.items():
            by_order.setdefault(str(applied["orderId"]), {})[(service, key)] = applied
    report = LedgerReport()
    services = list(services)
    returns, sensitive = _returns(services), _sensitive(services)
    for order in orders:
        if order.get("processState") not in CHECKED:
            continue
        order_id, name, version = order["orderId"], order["workflow"], order["workflowVersion"]
        definition = catalog.find(name, version)
        if definition is None:
            report.problems.append(f"{order_id}: workflow {name} version {version} is not in the catalog")
            continue
        views = list(order["steps"])
        if [view["name"] for view in views] != [step.name for step in definition.steps]:
            names = [view["name"] for view in views]
            report.problems.append(f"{order_id}: steps {names} are not those of {name} version {version}")
            continue
        report.orders += 1
        effects = by_order.get(order_id, {})
        keys = {(s.agent, idempotency_key(order_id, s.name)) for s in definition.steps if s.agent is not None}
        for service, key in sorted(effects.keys() - keys):
            report.problems.append(
                f"{order_id} ({name}): {service} holds an effect under {key!r}, no step's key"
            )
        steps = [
            _Step(index, step, view, effects.get((step.agent or "", idempotency_key(order_id, step.name))))
            for index, (step, view) in enumerate(zip(definition.steps, views, strict=True))
        ]
        _check_effects(report, order, definition, steps)
        _check_results(report, order, definition, steps, returns)
        _check_calls(report, order, definition, steps, sensitive)
        _check_traces(report, order, definition, steps)
    return report


def _check_traces(
    report: LedgerReport, order: Mapping[str, Any], definition: WorkflowDefinition, steps: list[_Step]
) -> None:
    """Every trace id a step's effect recorded is the order's: its service was called in its trace."""
    expected = order.get("traceId")
    if not expected:
        return  # the order was not traced
    named = f"{order['orderId']} ({definition.name})"
    for step in steps:
        traces = step.entry.get("traceIds") if step.entry is not None else None
        if not traces:
            continue  # no call came with a trace (or an older ledger kept none)
        report.traced += 1
        for trace in traces:
            if trace != expected:
                report.problems.append(
                    f"{named}: {step.name}'s call came in trace {trace}, not the order's {expected}"
                )


def _sensitive(services: Iterable[ServiceDefinition]) -> dict[tuple[str, str], tuple[str, ...]]:
    """The fields each (service, action) body declares sensitive (an undo without a body model: none)."""
    found: dict[tuple[str, str], tuple[str, ...]] = {}
    for service in services:
        for resource in service.resources:
            found[service.name, resource.apply] = resource.body.sensitive
            if resource.undo is not None:
                model = resource.undo_body
                found[service.name, resource.undo] = model.sensitive if model is not None else ()
    return found


# What a recorded call shows for a field its body declares sensitive (engine.calls.REDACTED).
REDACTED = "[redacted]"
ANSWERED = ("succeeded", "accepted")


def _check_calls(
    report: LedgerReport,
    order: Mapping[str, Any],
    definition: WorkflowDefinition,
    steps: list[_Step],
    sensitive: dict[tuple[str, str], tuple[str, ...]],
) -> None:
    """Each answered call the order records shows the body its service received, sensitive fields
    redacted."""
    named = f"{order['orderId']} ({definition.name})"
    for step in steps:
        if step.entry is None:
            continue
        for call in step.view.get("calls") or ():
            undo = call.get("kind") == "undo"
            received = step.entry.get("undoCarried" if undo else "carried")
            body = call.get("body")
            if call.get("outcome") not in ANSWERED or not isinstance(body, Mapping):
                continue
            if not isinstance(received, Mapping) or body.get("truncated") is True:
                continue  # an older ledger kept no body, or the record kept only the size of a large one
            action = (definition.steps[step.index].compensation if undo else step.definition.action) or ""
            hidden = sensitive.get((step.definition.agent or "", action), ())
            expected = {k: (REDACTED if k in hidden and v is not None else v) for k, v in received.items()}
            report.calls += 1
            report.redacted += sum(1 for k in hidden if received.get(k) is not None)
            if dict(body) != expected:
                what = "undo" if undo else "call"
                report.problems.append(
                    f"{named}: {step.name}'s {what} (attempt {call.get('attempt')}) shows the body "
                    f"{dict(body)}, but its service received {dict(received)}"
                )


def _returns(services: Iterable[ServiceDefinition]) -> dict[tuple[str, str], list[str]]:
    """The result names each (service, apply action) returns."""
    return {
        (service.name, resource.apply): resource.result_names
        for service in services
        for resource in service.resources
    }


def _check_effects(
    report: LedgerReport, order: Mapping[str, Any], definition: WorkflowDefinition, steps: list[_Step]
) -> None:
    """Which steps' effects must be applied, undone, or absent; and when a kept effect was applied."""
    order_id, state = order["orderId"], order["processState"]
    named = f"{order_id} ({definition.name})"
    undone_at = [
        int(step.entry["compensatedSeq"])
        for step in steps
        if step.entry is not None
        and step.entry["compensated"]
        and step.entry.get("compensatedSeq") is not None
    ]
    first_undo = min(undone_at, default=None)
    # A wait that ended badly (rejected, past its deadline, cancelled) lets no later step run.
    stopped = next((s for s in steps if not s.definition.calls and s.view.get("state") == "Failed"), None)
    for step in steps:
        entry, service = step.entry, step.definition.agent
        if stopped is not None and step.index > stopped.index and entry is not None:
            report.problems.append(
                f"{named}: {step.name} on {service} was called after {stopped.name} ended without going on "
                f"({stopped.view.get('lastError')}): {entry}"
            )
            continue
        if not step.definition.calls:
            done = step.view.get("state") == "Completed"
            if state == "Processed" and not done and not step.left_out:
                report.problems.append(
                    f"{named} Processed but its wait {step.name} is {step.view.get('state')}"
                )
            report.waits += 1
            continue
        undoable = step.definition.compensation is not None
        if step.left_out:
            if step.definition.when is None:
                report.problems.append(f"{named}: {step.name} is {LEFT_OUT} but declares no condition")
            if entry is not None:
                report.problems.append(f"{named}: {step.name} was left out but {service} applied it: {entry}")
            else:
                report.left_out += 1
            continue
        if entry is not None and not undoable and entry["compensated"]:
            report.problems.append(f"{named}: {step.name} cannot be undone but {service} undid it: {entry}")
            continue
        if state == "Processed":
            if entry is None or entry["applied"] != 1 or entry["compensated"] != 0:
                report.problems.append(f"{named} Processed but {step.name} on {service} is {entry}")
        elif entry is not None and undoable and entry["applied"] != entry["compensated"]:
            report.problems.append(f"{named} Compensated but {step.name} on {service} is {entry}")
        elif entry is not None and not undoable and entry["applied"]:
            report.kept += 1
            applied_at = entry.get("appliedSeq")
            # Comparable only when the ledger recorded both changes' places (not an older ledger's entry).
            # Exact with the file ledger (one counter of changes); the table ledger records each change's
            # time on the instance that made it, ordered up to the instances' clock skew (milliseconds,
            # where a reply, the next dispatch and the undo's call lie between the two changes).
            if applied_at is None or first_undo is None:
                continue
            report.ordered += 1
            if int(applied_at) > first_undo:
                report.problems.append(
                    f"{named} Compensated: {step.name} on {service}, which cannot be undone, was applied "
                    f"(change {applied_at}) after the order's first undo (change {first_undo})"
                )


def _check_results(
    report: LedgerReport,
    order: Mapping[str, Any],
    definition: WorkflowDefinition,
    steps: list[_Step],
    returns: dict[tuple[str, str], list[str]],
) -> None:
    """Every value passed on is the one returned; the order holds what each service returned."""
    named = f"{order['orderId']} ({definition.name})"
    # Which step of the workflow returns each result name (the catalog refuses two in one workflow).
    producers = {
        result: step
        for step in steps
        for result in returns.get((step.definition.agent or "", step.definition.action or ""), [])
    }
    for step in steps:
        held = dict(step.held)
        if held and step.entry is not None and step.entry.get("result") is not None and held != step.returned:
            report.problems.append(
                f"{named}: the order holds {held} as {step.name}'s result, but its service returned "
                f"{dict(step.returned)}"
            )
        if step.entry is None:
            continue
        # An apply's body is built from the results of the steps before it; an undo's, of the step too. A
        # step of a group reads only what the steps before the group returned (they run side by side).
        before = definition.group_range(step.index).start
        for call, own in (("carried", False), ("undoCarried", True)):
            carried = step.entry.get(call)
            if not isinstance(carried, Mapping):
                continue
            what = "its apply" if call == "carried" else "its undo"
            values = 0
            for result, value in carried.items():
                producer = producers.get(result)
                if producer is None or not (producer.index < before or (own and producer is step)):
                    continue  # a field of that name, but not a value this workflow passes on to this call
                if value is None:
                    if producer.held.get(result) is not None:
                        report.problems.append(
                            f"{named}: {what} of {step.name} carried no {result}, though {producer.name} had "
                            f"returned {producer.held[result]!r}"
                        )
                    continue
                if producer.entry is not None and producer.entry.get("result") is None:
                    continue  # recorded before the ledger kept results: nothing to compare with
                values += 1
                report.checked += 1
                if producer.entry is None or result not in producer.returned:
                    report.problems.append(
                        f"{named}: {what} of {step.name} carried {result}={value!r}, which {producer.name} "
                        "never returned (it has no effect with that value)"
                    )
                elif producer.returned[result] != value:
                    report.problems.append(
                        f"{named}: {what} of {step.name} carried {result}={value!r}, but {producer.name} "
                        f"returned {producer.returned[result]!r}"
                    )
            report.carrying += 1 if values else 0
