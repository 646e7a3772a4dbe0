"""End-to-end fixtures: the whole local stack (orders-devhost) on free ports, driven over HTTP."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from azure.servicebus import ServiceBusClient

from devhost import launch
from devhost.stack import local_wait_settings
from engine import queues
from engine.workflow import Approval, StepDefinition, Timer, WorkflowDefinition
from orders import catalog
from orders.models import order_input
from servicebus_emulator.launcher import connection_string
from simulators.ledger_check import check_ledger
from tests.support import wait_for

# Short timing knobs so recoveries happen in seconds.
FAST_SETTINGS = {
    "STEP_COMPLETE_BY_SECONDS": "3",
    "SUPERVISOR_SCHEDULE": "*/1 * * * * *",
    "SUPERVISOR_MAX_FAILURES": "3",
    "SUPERVISOR_BACKOFF_SECONDS": "0.5",
    "SUPERVISOR_MAX_BACKOFF_SECONDS": "1",
    # Every timing here is a tenth of Azure's; the breaker's open interval too (10 s there).
    "BREAKER_RESET_SECONDS": "1",
    # Every declared wait's setting: no timer's delay (it ends at once, with nothing sent), approvals due
    # in 3 s; the tests of waits set their own.
    **local_wait_settings(timer_seconds=0, approval_seconds=3),
}
TERMINAL = {"Processed", "Compensated", "Error"}
SERVICES = tuple(service.name for service in catalog.SERVICES)
# What new orders run: the latest version of each declared workflow.
WORKFLOWS = [
    workflow for workflow in catalog.CATALOG.workflows if catalog.CATALOG.current(workflow.name) is workflow
]


def _default_workflow() -> WorkflowDefinition:
    workflow = catalog.CATALOG.current(catalog.CATALOG.default)
    assert workflow is not None, catalog.CATALOG.default
    return workflow


def returned(step: StepDefinition, order_id: str) -> dict[str, Any]:
    """The values the simulator of ``step``'s service answers for an order's apply of it, as declared."""
    service = next(s for s in catalog.SERVICES if s.name == step.agent)
    resource, _ = service.resource(step.action)
    return resource.simulated(f"{order_id}:{step.name}")


def runs_on(
    workflow: WorkflowDefinition, example: dict[str, Any], order_id: str
) -> tuple[StepDefinition, ...]:
    """The steps an order ``order_id`` of ``example`` runs, each step before answering what its simulator
    is declared to answer for that order (a condition may read a returned value)."""
    # What conditions read is the input as stored (with what its model derives, e.g. a total).
    document: dict[str, Any] = {"input": order_input(workflow, example), "results": {}}
    ran = []
    for step in workflow.steps:
        if step.when is None or step.when.holds(document):
            ran.append(step)
            if step.calls:
                document["results"].update(returned(step, order_id))
    return tuple(ran)


def _straight(workflow: WorkflowDefinition, example: dict[str, Any], order_id: str) -> bool:
    ran = runs_on(workflow, example, order_id)
    return not any(isinstance(step.wait, Approval) for step in ran) and all(
        step in ran for step in workflow.steps if step.calls
    )


def straight_input(workflow: WorkflowDefinition, order_id: str) -> dict[str, Any]:
    """The input the tests submit for an order ``order_id`` of ``workflow``: its first declared example on
    which every call runs and no step waits for a person; else the first with no such wait, and the steps
    its conditions leave out are left out in the tests too."""
    examples = workflow.examples()
    assert examples, f"workflow {workflow.name} declares no example input"
    unattended = [
        e for e in examples if not any(isinstance(s.wait, Approval) for s in runs_on(workflow, e, order_id))
    ]
    assert unattended, (
        f"workflow {workflow.name}: every example waits for an approval; declare one that does not, the "
        "tests give no approval they do not ask for"
    )
    return next((e for e in unattended if _straight(workflow, e, order_id)), unattended[0])


def straight_id(workflow: WorkflowDefinition) -> str:
    """A fresh order id on which an example of ``workflow`` runs every call (where a condition reads a
    returned value, the simulators' answers, and so the path, depend on the id); else any fresh id, and
    the tests follow the path it takes."""
    ids = [f"o-{uuid.uuid4().hex[:12]}" for _ in range(64)]
    return next((i for i in ids if any(_straight(workflow, e, i) for e in workflow.examples())), ids[0])


def passed(workflow: WorkflowDefinition, order_id: str) -> set[str]:
    """The waits the tests' order ``order_id`` of ``workflow`` passes at once, Completed with no attempt: the
    timers (the tests' cancellation window is none)."""
    example = straight_input(workflow, order_id)
    return {s.name for s in runs_on(workflow, example, order_id) if isinstance(s.wait, Timer)}


def runs(workflow: WorkflowDefinition, order_id: str) -> tuple[StepDefinition, ...]:
    """The calls the tests' order ``order_id`` of ``workflow`` makes (the steps its conditions leave out are
    left out; waits call nothing, and the tests' cancellation window is none)."""
    example = straight_input(workflow, order_id)
    return tuple(step for step in runs_on(workflow, example, order_id) if step.calls)


def reached(step: StepDefinition, workflow: WorkflowDefinition) -> list[StepDefinition]:
    """The steps of ``workflow`` an order has come to by the time ``step`` is decided: every step before it,
    and the steps of its group (dispatched with it)."""
    index = list(workflow.steps).index(step)
    return [
        other
        for n, other in enumerate(workflow.steps)
        if n <= index or (step.group is not None and other.group == step.group)
    ]


def alone_on_their_service(workflow: WorkflowDefinition, order_id: str) -> tuple[StepDefinition, ...]:
    """The calls of the tests' order ``order_id`` of ``workflow`` whose service no other call of it uses
    before them or beside them in their group. A fault profile is per service: faulting the service of one
    of these faults no other step until that one is decided (a call after it on the same service meets the
    fault only if it still holds then)."""
    calls = runs(workflow, order_id)

    def alone(step: StepDefinition) -> bool:
        came = reached(step, workflow)
        return not any(
            other != step and other.call_agent == step.call_agent for other in calls if other in came
        )

    return tuple(step for step in calls if alone(step))


# What a submission that names no workflow runs, and its steps by role: tests that need "a step" (to hang
# its service, to act on it) take one of these, so a workflow with other steps needs no test edited. A
# fault profile is per service: the role's step should be the only one on its service in the workflow.
DEFAULT_WORKFLOW = _default_workflow()
_CALLS = runs(DEFAULT_WORKFLOW, straight_id(DEFAULT_WORKFLOW))
FIRST_STEP = _CALLS[0]
MIDDLE_STEP = _CALLS[len(_CALLS) // 2]
LAST_STEP = _CALLS[-1]


def position(step: StepDefinition, workflow: WorkflowDefinition = DEFAULT_WORKFLOW) -> int:
    """Where ``step`` is in ``workflow`` (an index into an order's ``steps``)."""
    return list(workflow.steps).index(step)


@dataclass
class LocalStack:
    """A running orders-devhost and clients for it."""

    devhost: launch.RunningDevhost
    data_dir: Path
    api: httpx.Client
    simulators: httpx.Client
    sb_port: int
    _status: dict[str, list[tuple[str, str | None]]] = field(default_factory=dict)

    @property
    def state(self) -> dict[str, Any]:
        """devhost.json."""
        return json.loads((self.data_dir / "devhost.json").read_text())

    def wait_restarted(self, victims: list[int], timeout: float = 60) -> None:
        """Wait until the devhost has restarted every worker in ``victims`` (PIDs) and the HTTP worker
        answers again: devhost.json names a new PID as soon as it is started, seconds before it serves."""
        wait_for(
            lambda: all(w["pid"] not in victims for w in self.state["workers"]),
            timeout=timeout,
            what="every killed worker to be restarted",
        )

        def serving() -> bool:
            try:
                return self.api.get("/api/health").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(serving, timeout=timeout, interval=0.1, what="the restarted HTTP worker to answer")

    def servicebus(self) -> ServiceBusClient:
        """An SDK client on the stack's Service Bus emulator."""
        return ServiceBusClient.from_connection_string(connection_string(self.sb_port))

    def status_events(self, order_id: str, until: str, timeout: float = 20) -> list[tuple[str, str | None]]:
        """(event, step) pairs the Scheduler published for one order, in order, up to event ``until``.

        Messages for other orders are kept for later calls, since tests share the status queue.
        """
        seen = self._status.setdefault(order_id, [])
        with self.servicebus() as client, client.get_queue_receiver(queues.STATUS_QUEUE) as receiver:

            def arrived() -> bool:
                for message in receiver.receive_messages(max_message_count=100, max_wait_time=1):
                    receiver.complete_message(message)
                    body = json.loads(str(message))
                    self._status.setdefault(str(message.correlation_id), []).append(
                        (body["event"], body.get("step"))
                    )
                return any(event == until for event, _ in seen)

            wait_for(arrived, timeout=timeout, interval=0.0, what=f"status {until} for {order_id}")
        return list(seen)

    def worker_log(self, n: int = 1) -> str:
        return (self.data_dir / "logs" / f"worker-{n}.log").read_text(errors="replace")

    def all_worker_logs(self) -> str:
        return "".join(
            p.read_text(errors="replace") for p in sorted((self.data_dir / "logs").glob("worker-*.log"))
        )

    # ---- orders --------------------------------------------------------------------------------
    def submit(
        self, order_id: str | None = None, workflow: WorkflowDefinition | None = None, **overrides: Any
    ) -> str:
        """Submit an order; ``workflow`` other than the default is named in the body (the default is not,
        so that a submission naming none keeps being covered)."""
        order_id = order_id or straight_id(workflow or DEFAULT_WORKFLOW)
        body = new_order(order_id, workflow, **overrides)
        response = self.api.post("/api/orders", json=body)
        assert response.status_code == 202, response.text
        return order_id

    def order(self, order_id: str) -> dict[str, Any]:
        response = self.api.get(f"/api/orders/{order_id}")
        assert response.status_code == 200, response.text
        return response.json()

    def act(
        self,
        order_id: str,
        action: str,
        body: dict[str, Any] | None = None,
        tries: int = 5,
        client: httpx.Client | None = None,
    ) -> httpx.Response:
        """An operator action (``resubmit``, ``cancel``, ``steps/<step>/retry``...) guarded by the ETag of a
        fresh read, read again if the order moved in between (412), as a client would; sent by ``client``
        (another role's) when given."""
        for _ in range(tries):
            read = self.api.get(f"/api/orders/{order_id}")
            headers = {"if-match": read.headers.get("etag", '"none"')}
            response = (client or self.api).post(
                f"/api/orders/{order_id}/{action}", json=body, headers=headers
            )
            if response.status_code != 412:
                return response
        return response

    def wait_terminal(self, order_id: str, timeout: float = 60) -> dict[str, Any]:
        def terminal() -> dict[str, Any] | None:
            order = self.order(order_id)
            return order if order["processState"] in TERMINAL else None

        return wait_for(terminal, timeout=timeout, interval=0.2, what=f"order {order_id} to finish")

    def wait_state(
        self, order_id: str, predicate: Any, timeout: float = 60, what: str = ""
    ) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            order = self.order(order_id)
            return order if predicate(order) else None

        return wait_for(check, timeout=timeout, interval=0.2, what=what or f"order {order_id}")

    # ---- simulators ----------------------------------------------------------------------------
    def faults(self, **profiles: dict[str, Any]) -> None:
        response = self.simulators.post("/faults", json=profiles)
        assert response.status_code == 200, response.text

    def clear_faults(self) -> None:
        self.faults(**{s: {} for s in SERVICES})

    def hung_calls(self, service: str) -> int:
        """How many calls to ``service`` its simulator has held in a hang so far."""
        return int(self.simulators.get("/stats").json()[service]["hang"])

    def wait_hung(self, service: str, more_than: int) -> None:
        """Wait until a call to ``service`` hangs in its simulator (``more_than`` hung before). An order
        shows its step Running before the Agent has called the service, so faults cleared at that moment
        may never reach the call."""
        wait_for(
            lambda: self.hung_calls(service) > more_than,
            timeout=30,
            interval=0.1,
            what=f"a call to {service} to hang",
        )

    def ledger(self) -> dict[str, dict[str, Any]]:
        return self.simulators.get("/ledger").json()

    def entries(self, order_id: str) -> dict[str, dict[str, Any]]:
        """This order's ledger entry per service."""
        ledger = self.ledger()
        return {s: e for s in SERVICES for k, e in ledger[s].items() if e["orderId"] == order_id}

    def step_entries(self, order_id: str) -> dict[str, dict[str, Any]]:
        """This order's ledger entry per step that has one (the key of a step's effect is
        ``<orderId>:<step>``, on the service the order's workflow version runs the step on)."""
        order = self.order(order_id)
        definition = catalog.CATALOG.find(order["workflow"], order["workflowVersion"])
        assert definition is not None, order
        ledger = self.ledger()
        found = {
            step.name: ledger[step.call_agent].get(f"{order_id}:{step.name}")
            for step in definition.steps
            if step.calls  # a wait leaves nothing in a ledger
        }
        return {step: entry for step, entry in found.items() if entry is not None}

    def ledger_problems(self, order_ids: list[str]) -> list[str]:
        """The ledger check of the demo over these orders (none: every finished order agrees)."""
        return check_ledger([self.order(order_id) for order_id in order_ids], self.ledger())


def new_order(
    order_id: str | None = None, workflow: WorkflowDefinition | None = None, **overrides: Any
) -> dict[str, Any]:
    """A body for ``POST /api/orders``: the workflow's straight input (the default workflow's if none),
    naming the workflow unless it is the default (so that a submission naming none stays covered)."""
    workflow = workflow or DEFAULT_WORKFLOW
    # With no id the service gives one: no path is asserted then, and any id picks the example.
    body: dict[str, Any] = dict(straight_input(workflow, order_id or "o-new"))
    if workflow.name != catalog.CATALOG.default:
        body["workflow"] = workflow.name
    if order_id is not None:
        body["orderId"] = order_id
    body.update(overrides)
    return body


def another_order(order_id: str) -> dict[str, Any]:
    """A body for ``order_id`` that differs from :func:`new_order`'s (another example of the default
    workflow, else another workflow's order): the same id with it is a conflict."""
    straight = straight_input(DEFAULT_WORKFLOW, order_id)
    other = next((e for e in DEFAULT_WORKFLOW.examples() if e != straight), None)
    if other is not None:
        return {**other, "orderId": order_id}
    second = next((w for w in WORKFLOWS if w.name != DEFAULT_WORKFLOW.name), None)
    if second is None:
        pytest.skip("one workflow with one example: no other body to conflict with")
    return new_order(order_id, second)


def start_stack(
    data_dir: Path,
    workers: int = 1,
    extra_env: dict[str, str] | None = None,
    port: int | None = None,
    function_key: str | None = None,
    master_key: str | None = None,
    auth: str = "open",
    trust_principal_headers: bool = False,
    storefronts: tuple[str, ...] = (),
    **launch_options: Any,
) -> LocalStack:
    """Start orders-devhost on free ports and wait until its HTTP API answers (``launch_options``: the
    rest of :func:`devhost.launch.start`'s, e.g. another release's workers beside).

    With keys the devhost checks them; the stack's ``api`` client then sends the function key. With
    ``auth="roles"`` it enforces the API's roles; the ``api`` client then acts as the operator (its key),
    and ``stack.devhost.keys`` holds every role's key.
    """
    try:
        running = launch.start(
            data_dir,
            workers=workers,
            env={**FAST_SETTINGS, **(extra_env or {})},
            port=port,
            function_key=function_key,
            master_key=master_key,
            auth=auth,
            trust_principal_headers=trust_principal_headers,
            storefronts=storefronts,
            **launch_options,
        )
    except RuntimeError as exc:
        log = data_dir / "devhost.out"
        raise AssertionError(f"{exc}\n{log.read_text() if log.exists() else ''}") from exc
    key = running.keys.get("operator") or function_key
    headers = {"x-functions-key": key} if key else None
    api = httpx.Client(base_url=running.api_url, timeout=10, headers=headers)
    sims = httpx.Client(base_url=running.simulators_url, timeout=10)
    return LocalStack(running, data_dir, api, sims, running.sb_port)


def stop_stack(stack: LocalStack) -> None:
    stack.api.close()
    stack.simulators.close()
    stack.devhost.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """One stack with two workers, shared by a module's tests."""
    running = start_stack(tmp_path_factory.mktemp("devhost"), workers=2)
    try:
        yield running
    finally:
        stop_stack(running)


@pytest.fixture
def calm(stack: LocalStack) -> Iterator[LocalStack]:
    """The shared stack with no faults before and after the test."""
    stack.clear_faults()
    yield stack
    stack.clear_faults()
