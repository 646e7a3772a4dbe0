"""The ledger: what the remote services did against what the order says (the invariants' list:
:mod:`simulation.oracle`). On every call and every effect: an undo never lands while a later step is applied,
a step left out is never called, a result passed on is the one returned, a step that cannot be undone is
never applied after an undo of its order landed, no call passes a wait or a group before it; and once the
run has settled (:func:`settled_ledger`): what is applied, undone and left matches how the order ended."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.state import ProcessState, StepState, StepStatus

from ..services import Effect
from ..storage import Storage
from ..tables import Row
from .core import OracleCore, OrderTruth, _group_of, _undoable
from .groups import Groups
from .waits import Waits


class Ledger(Waits, Groups):
    """The invariants at the services."""

    def _result_recorded(self, truth: OrderTruth, step: StepState) -> None:
        """A step Completed from its reply: what it records is what its service returned."""
        truth.returned.add(step.index)
        effect = self.ledger.get((truth.agents[step.index], f"{truth.order_id}:{step.name}"))
        returned = effect.returned if effect is not None else None
        if (step.result or {}) != (returned or {}):
            self.violation(
                truth.order_id,
                f"a result passed on is not the one returned: step {step.name} recorded {step.result}, "
                f"its service returned {returned}",
            )

    def effect_applied(self, effect: Effect, late: bool) -> None:
        truth = self.orders.get(effect.order_id)
        if truth is None:
            self.violation(effect.order_id, f"an effect {effect.key} of an order never submitted")
            return
        truth.effects.append(effect)
        self.note(effect.order_id, "applied {} {}{}", effect.service, effect.key, " (late)" if late else "")
        index = effect.step_index
        if len(_group_of(truth, index)) > 1 and _undoable(truth, index) and effect.undone_before_applied:
            # Its own undo landed first and found nothing: the effect stays (a decision slower than the
            # budget, a fault, is withdrawn by the undo instead: never applied).
            self.violation(
                effect.order_id,
                f"{effect.key}, a step of a group, was applied after its own undo landed (and found nothing "
                f"to undo): a failed or cancelled group lets its steps settle before it is undone",
            )
        if not _undoable(truth, index) and truth.first_undo_at is not None:
            self.violation(
                effect.order_id,
                f"{effect.key}, which cannot be undone, was applied after an undo of its order landed "
                f"(at {truth.first_undo_at:.3f}): the undo did not wait for it",
            )

    def effect_undone(self, effect: Effect) -> None:
        truth = self.orders.get(effect.order_id)
        if truth is None:
            return
        self.note(effect.order_id, "undone {} {}", effect.service, effect.key)
        if truth.first_undo_at is None:
            truth.first_undo_at = self.now()
        for other in truth.effects:
            if (
                other.step_index > effect.step_index
                and other.applied_at is not None
                and other.compensated_at is None
                and _undoable(truth, other.step_index)
            ):
                self.violation(
                    effect.order_id,
                    f"{effect.key} was undone while {other.key}, a later step, was still applied",
                )

    def called(
        self, effect: Effect, compensating: bool, carried: Mapping[str, Any], given: Mapping[str, Any]
    ) -> None:
        """A call reached a service, carrying ``carried``: the result values its body reads, by name (None:
        one it goes without); its request carried the order's input ``given``."""
        truth = self.orders.get(effect.order_id)
        if truth is None:
            return
        index = effect.step_index
        if not compensating:
            self._fenced(truth, index, given)
        if carried:
            self.note(effect.order_id, "call {} undo={} carried {}", effect.key, compensating, dict(carried))
        if index >= len(truth.steps):
            return  # under the key of no step: reported when the run has settled
        if index in truth.left_out or not self._runs(truth, index):
            self.violation(
                effect.order_id,
                f"{effect.key} was called{' to undo it' if compensating else ''}, but its condition does not "
                f"hold ({self._condition(truth, index)}): a step left out by its condition is never called",
            )
        if not compensating:
            self._passes_waits(truth, index, self.now(), "was called")
            self._passes_groups(truth, index, self.now(), "was called", joined=True)
        for name, value in carried.items():
            producer = truth.producers.get(name)
            expected = self._returned(truth, producer).get(name) if producer is not None else None
            if value is not None:
                self.count("result values passed on")
            if value != expected:
                made = truth.steps[producer] if producer is not None else "no step"
                self.violation(
                    effect.order_id,
                    f"a result passed on is not the one returned: the {'undo' if compensating else 'call'} "
                    f"of {truth.steps[index]} carried {name}={value!r}, {made} returned {expected!r}",
                )

    def _fenced(self, truth: OrderTruth, index: int, given: Mapping[str, Any]) -> None:
        """Updates are fenced by the step that reads their fields: every call from that step on carries the
        value the input holds (no update was saved once that step started), the same on every call."""
        for name, fence in truth.fences.items():
            if index < fence:
                continue
            value = given.get(name)
            first = truth.fenced.setdefault(name, value)
            self.count("calls from an update's fence on")
            if value != first or value != truth.input.get(name):
                self.violation(
                    truth.order_id,
                    f"the call of {truth.steps[index]} carried {name}={value!r}, but the first call from "
                    f"{truth.steps[fence]} on carried {first!r} and the input holds "
                    f"{truth.input.get(name)!r}: an update of {name} was saved after {truth.steps[fence]}, "
                    "which reads it, started",
                )


def settled_ledger(
    oracle: OracleCore,
    storage: Storage,
    ledger: Mapping[tuple[str, str], Effect],
    order_id: str,
    final_name: str,
    where: str,
    row: Row | None,
) -> None:
    """Once the run has settled, the order's effects at the services agree with how it ended (``where``:
    live, history or purged; ``row``: its state record there)."""
    truth = oracle.orders[order_id]
    steps: list[StepState] | None = None
    if where == "history" and row is not None:
        steps = storage.archived(row).steps
    elif where == "live":
        prefix = f"order|{order_id}|step|"
        rows = storage.live.scan(storage.pk(order_id), prefix, prefix + "~")
        steps = [storage.step(r) for _, r in rows]
    keys = {f"{order_id}:{name}": index for index, name in enumerate(truth.steps)}
    for effect in truth.effects:
        if effect.applies > 1:
            oracle.violation(order_id, f"{effect.key} was applied {effect.applies} times")
        if effect.key not in keys or keys[effect.key] != effect.step_index:
            oracle.violation(order_id, f"an effect under {effect.key}, the key of no step of the order")
    for index in sorted(truth.left_out):
        called = ledger.get((truth.agents[index], f"{order_id}:{truth.steps[index]}"))
        if called is not None:
            oracle.violation(
                order_id,
                f"{truth.steps[index]} was left out by its condition, but called {called.calls} times",
            )
    effects = {e.step_index: e for e in truth.effects}
    for index, (how, at) in sorted(truth.closed.items()):
        for effect in truth.effects:
            if effect.step_index > index and effect.applied_at is not None:
                oracle.violation(
                    order_id,
                    f"{truth.steps[index]} {how} at {at:.3f}, yet {effect.key} was applied (at "
                    f"{effect.applied_at:.3f}): nothing after a wait that ended so is ever applied",
                )
    if final_name == ProcessState.PROCESSED.value:
        for index, name in enumerate(truth.steps):
            found = effects.get(index)
            skipped = index in truth.skipped
            if index in truth.left_out:
                continue  # never called (above)
            if truth.waits[index] is not None:  # a wait: no effect, but it ended (its time, an approve)
                status = truth.views[index].status
                if status is not StepStatus.COMPLETED or index in truth.closed:
                    oracle.violation(order_id, f"Processed, but the wait {name} is {status.value}")
                continue
            if found is not None and found.compensated_at is not None:
                oracle.violation(order_id, f"Processed, but {name} was undone")
            elif found is None and not skipped:
                oracle.violation(order_id, f"Processed, but {name} was never applied")
    elif final_name == ProcessState.COMPENSATED.value:
        for effect in truth.effects:
            if effect.compensated_at is not None:
                continue
            if effect.step_index < len(truth.undoable) and not truth.undoable[effect.step_index]:
                oracle.count("steps without undo left applied in a Compensated order")
            elif effect.step_index < len(truth.groups) and len(truth.groups[effect.step_index]) > 1:
                oracle.violation(
                    order_id,
                    f"Compensated, but {effect.key} is still applied: a failed or cancelled group leaves no "
                    f"applied effect",
                )
            else:
                oracle.violation(order_id, f"Compensated, but {effect.key} is still applied")
    if steps is not None and final_name == ProcessState.PROCESSED.value:
        for step in steps:
            left_out = step.index in truth.left_out
            wanted = StepStatus.LEFT_OUT if left_out else StepStatus.COMPLETED
            if step.status is not wanted:
                oracle.violation(order_id, f"Processed with step {step.name} {step.status.value}")
