"""The kinds of wait as declared (engine.waits): each one's name, rows and operations are its own and agree
with the rest of the engine. What each kind does to a task is tested in test_waits.py."""

from __future__ import annotations

from typing import get_args

from engine import machine, waits
from engine.rules import Operation, Slot
from engine.state import ProcessState
from engine.workflow import Approval, StepDefinition, Timer


def test_every_kind_is_named_once_and_the_names_are_the_kinds() -> None:
    names = [kind.name for kind in waits.KINDS]
    assert len(set(names)) == len(names)
    assert set(waits.WAIT_KINDS) == set(names) == set(waits.BY_NAME)
    assert [waits.of(name) for name in names] == list(waits.KINDS)
    assert waits.of(None) is None and waits.of("nothing") is None
    # The kinds that park: those that may wait long (a callback's wait is a step's CompleteBy).
    assert waits.PARKED == (waits.TIMER, waits.APPROVAL)


def test_a_declared_wait_names_its_kind() -> None:
    """The declarations' kinds (the discriminator of a step's ``wait``) are kinds of engine.waits."""
    declared = get_args(StepDefinition.model_fields["wait"].annotation)
    kinds = {
        get_args(model.model_fields["kind"].annotation)[0] for model in declared if model is not type(None)
    }
    assert kinds == {waits.TIMER, waits.APPROVAL}
    assert Timer(after_seconds=1).kind == waits.TIMER_WAIT.name
    assert Approval(deadline_seconds=1).kind == waits.APPROVAL_WAIT.name


def test_a_kind_s_rows_are_its_own_and_in_the_table_at_their_slots() -> None:
    listed = list(machine._LISTED)
    assert sorted(s.value for s in listed if isinstance(s, Slot)) == sorted(s.value for s in Slot)
    for kind in waits.KINDS:
        for slot, rule in kind.rows:
            assert rule in machine.TABLE, f"{kind.name}'s row {rule} is not in the table"
            # A row of a kind is guarded by the kind (the wait the task is in), or leads into it: a
            # service's answer that it will call back (its undo: kept as it is).
            leads_in = rule.operation is Operation.ACCEPT
            assert rule.wait == kind.name or leads_in, f"{kind.name}'s row {rule} guards on {rule.wait}"
            assert slot in Slot
        # The operations that end a kind are allowed on it alone.
        for operation in kind.ends:
            rows = [r for r in machine.TABLE if r.operation is operation]
            assert rows and all(r.wait == kind.name for r in rows), (kind.name, operation)
            assert waits.ended_by(operation) is kind
    # The rows the kinds declare are all the table's rows that guard on a kind.
    guarded = [r for r in machine.TABLE if r.wait is not None]
    declared = [rule for kind in waits.KINDS for _, rule in kind.rows if rule.wait is not None]
    assert sorted(map(repr, guarded)) == sorted(map(repr, declared))
    assert waits.ended_by(Operation.RETRY_STEP) is None and waits.ended_by(Operation.CANCEL) is None


def test_a_kind_expires_by_an_operation_its_rows_allow_on_a_waiting_task() -> None:
    for kind in waits.KINDS:
        rows = [rule for _, rule in kind.rows if rule.operation is kind.expires]
        assert rows and all(r.source is ProcessState.WAITING for r in rows), kind.name
