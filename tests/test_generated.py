"""The files derived from the declaration (``python -m orders.generate``) are up to date, and the check
that says so notices a file that falls behind, whichever way it does."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from engine import queues
from engine.conditions import Test
from engine.workflow import Approval, StepDefinition, Timer, WorkflowCatalog, WorkflowDefinition
from orders import catalog_docs, generate
from orders.catalog import CATALOG, SERVICES
from orders.services.declaration import ServiceBody, ServiceDefinition, ServiceResult
from servicebus_emulator.config import load_config
from simulators.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def test_the_generated_files_are_up_to_date() -> None:
    behind = generate.stale(ROOT)
    assert not behind, generate.stale_message(behind)


def test_every_generated_file_is_written() -> None:
    assert set(generate.render(ROOT)) == set(generate.GENERATED)
    assert all((ROOT / name).is_file() for name in generate.GENERATED)


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A root holding the generated files as they are in the repository."""
    for name in generate.GENERATED:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, tmp_path / name)
    return tmp_path


def test_a_tampered_file_is_reported_with_the_command_and_regenerated(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = copy / generate.EMULATOR_CONFIG
    config.write_text(config.read_text().replace('"MaxDeliveryCount": 5', '"MaxDeliveryCount": 7', 1))
    assert generate.main(["--check", "--root", str(copy)]) == 1
    err = capsys.readouterr().err
    assert f"  {generate.EMULATOR_CONFIG}\n" in err
    assert "run `python -m orders.generate` (or `make generate`)" in err
    assert generate.BICEP_CATALOG not in err, "only the file that is behind"

    assert generate.main(["--root", str(copy)]) == 0
    assert (copy / generate.EMULATOR_CONFIG).read_text() == (ROOT / generate.EMULATOR_CONFIG).read_text()
    assert generate.main(["--check", "--root", str(copy)]) == 0


def test_a_missing_file_is_reported(copy: Path) -> None:
    (copy / generate.BICEP_CATALOG).unlink()
    assert generate.stale(copy) == [generate.BICEP_CATALOG]


def test_the_command_line_exits_1_naming_the_stale_file(copy: Path) -> None:
    (copy / generate.BICEP_CATALOG).write_text("{}\n")
    run = subprocess.run(
        [sys.executable, "-m", "orders.generate", "--check", "--root", str(copy)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1
    assert generate.BICEP_CATALOG in run.stderr and "python -m orders.generate" in run.stderr


def with_service(name: str) -> tuple[tuple[ServiceDefinition, ...], WorkflowCatalog]:
    """The declaration with one more service and a workflow that uses it."""
    template = SERVICES[0]
    service = ServiceDefinition(name=name, description="a new service", resources=template.resources)
    step = StepDefinition(name="new-step", agent=name, action=template.resources[0].apply)
    workflow = WorkflowDefinition(name="new-workflow", version=1, steps=(step,))
    return (*SERVICES, service), WorkflowCatalog(workflows=(*CATALOG.workflows, workflow))


# A service name no declaration here uses (the first of these that is free).
NEW = next(name for name in ("alpha", "beta", "gamma", "delta") if name not in {s.name for s in SERVICES})


def test_a_new_service_gets_its_queue_service_entry_and_sample_setting(copy: Path) -> None:
    services, catalog = with_service(NEW)
    added = services[-1]
    assert set(generate.stale(copy, services, catalog)) == set(generate.GENERATED)
    generate.write(copy, services, catalog)
    assert generate.stale(copy, services, catalog) == []

    emulator = load_config(copy / generate.EMULATOR_CONFIG).queues
    agent = emulator[queues.agent_queue(NEW)]
    existing = emulator[queues.agent_queue(SERVICES[0].name)]
    assert agent == existing, "a new agent queue has the agent queue properties"

    bicep = json.loads((copy / generate.BICEP_CATALOG).read_text())
    assert bicep["services"][NEW] == {
        "name": NEW,
        "queue": f"agent-{NEW}",
        "urlSetting": f"{NEW.upper()}_SERVICE_URL",
        "functionName": f"agent_{NEW}",
    }
    assert added.url_setting == f"{NEW.upper()}_SERVICE_URL"
    assert [q["name"] for q in bicep["queues"]] == queues.all_queues(catalog.agents)

    before = json.loads((ROOT / generate.SAMPLE_SETTINGS).read_text())["Values"]
    after = json.loads((copy / generate.SAMPLE_SETTINGS).read_text())["Values"]
    assert after[added.url_setting] == generate.LOCAL_SIMULATORS_URL
    assert {k: v for k, v in after.items() if k != added.url_setting} == before, "others kept"
    assert f"`{NEW}`" in (copy / generate.CUSTOMIZING_DOC).read_text()

    # Declared no more: its entries go again, and the files are the repository's.
    generate.write(copy)
    for name in generate.GENERATED:
        assert (copy / name).read_text() == (ROOT / name).read_text(), name


def test_the_sample_keeps_a_service_s_own_value_and_its_place(copy: Path) -> None:
    sample = copy / generate.SAMPLE_SETTINGS
    content = json.loads(sample.read_text())
    setting = SERVICES[-1].url_setting
    content["Values"][setting] = "http://127.0.0.1:9000"
    sample.write_text(json.dumps(content, indent=2) + "\n")
    assert generate.stale(copy) == []
    keys = list(json.loads(sample.read_text())["Values"])
    positions = [keys.index(s.url_setting) for s in SERVICES]
    assert positions == list(range(positions[0], positions[0] + len(SERVICES))), "together, in order"


def test_a_new_wait_s_setting_is_added_to_the_sample_short_and_an_existing_one_kept() -> None:
    wait = Approval(deadline_seconds=86_400, setting="SEAT_APPROVAL_SECONDS")
    timer = Timer(after_seconds=1.5, setting="COOLING_OFF_SECONDS")
    steps = (StepDefinition(name="approve", wait=wait), StepDefinition(name="cool-off", wait=timer))
    catalog = WorkflowCatalog(workflows=(*CATALOG.workflows, WorkflowDefinition(name="waits", steps=steps)))
    current = json.loads((ROOT / generate.SAMPLE_SETTINGS).read_text())
    values = generate.sample_settings(current, SERVICES, catalog)["Values"]
    assert values["SEAT_APPROVAL_SECONDS"] == f"{generate.SAMPLE_WAIT_SECONDS['approval']:g}"
    assert values["COOLING_OFF_SECONDS"] == "1.5", "never longer than declared"
    assert {k: v for k, v in values.items() if k in current["Values"]} == current["Values"], "others kept"


def test_the_output_is_deterministic_json_with_a_final_newline() -> None:
    first, second = generate.render(ROOT), generate.render(ROOT)
    assert first == second
    for name, text in first.items():
        assert text.endswith("}\n") or name.endswith(".md"), name
        if name.endswith(".json"):
            assert json.loads(text)


def test_the_emulator_config_has_the_properties_of_each_queue_s_kind() -> None:
    config = json.loads((ROOT / generate.EMULATOR_CONFIG).read_text())
    (namespace,) = config["UserConfig"]["Namespaces"]
    assert namespace["Name"] == generate.EMULATOR_NAMESPACE
    for queue in namespace["Queues"]:
        expected = queues.queue_properties(queue["Name"])
        assert queue["Properties"]["MaxDeliveryCount"] == expected.max_delivery_count, queue["Name"]
        assert queue["Properties"]["LockDuration"] == expected.lock_duration, queue["Name"]
    assert [q["Name"] for q in namespace["Queues"]] == queues.all_queues(CATALOG.agents)


def test_a_queue_that_is_not_the_engine_s_has_no_properties() -> None:
    with pytest.raises(KeyError, match="not a queue of the engine"):
        queues.queue_properties("somewhere-else")


def test_new_sample_settings_point_at_the_local_simulators() -> None:
    port = build_parser().get_default("port")
    assert generate.LOCAL_SIMULATORS_URL.endswith(f"127.0.0.1:{port}"), "the simulators' default port"


def test_the_docs_tables_show_inputs_conditions_results_and_steps_that_cannot_be_undone() -> None:
    """Rendered from a declaration of the test's own: each construct where a reader looks for it."""

    class Line(BaseModel):
        model_config = ConfigDict(extra="forbid")
        sku: str
        gift: bool = False

    class Basket(BaseModel):
        model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"lines": [{"sku": "a"}]}]})
        lines: list[Line]
        note: str | None = None

    class Ticket(ServiceResult):
        ticket_id: str

    class Reads(ServiceBody):
        needs = ("ticketId",)
        may_use = ("other",)

    template = SERVICES[0].resources[0]
    kept = template.model_copy(
        update={"collection": "tickets", "apply": "open", "undo": "close", "result": Ticket}
    )
    sent = template.model_copy(
        update={"collection": "mails", "apply": "mail", "undo": None, "undone": None, "body": Reads}
    )
    service = ServiceDefinition(name="desk", description="d", resources=(kept, sent))
    steps = (
        StepDefinition(name="open-ticket", agent="desk", action="open", compensation="close"),
        StepDefinition(
            name="mail-it",
            agent="desk",
            action="mail",
            when=Test(field="input.lines[].gift", op="==", value=True),
        ),
    )
    workflow = WorkflowDefinition(name="desk-work", input=Basket, steps=steps)
    table = catalog_docs.render((service,), WorkflowCatalog.of(workflow))
    assert "Input `Basket`" in table
    assert (
        "`lines[].sku` (text); `lines[].gift` (true/false, default `false`); `note` (text, optional)" in table
    )
    # Each row by the first name it shows: the step's, or the service's.
    rows = {m.group(1): line for line in table.splitlines() if (m := re.search(r"^\|[^`]*`([^`]+)`", line))}
    assert "| always | `ticketId` | — | `close` |" in rows["open-ticket"]
    condition, reads = "when `any input.lines[].gift == true`", "`ticketId`, `other` if returned"
    assert f"| {condition} | — | {reads} | — (cannot be undone) |" in rows["mail-it"]
    assert "tickets (`open` / `close`), mails (`mail` / —)" in rows["desk"]
