"""Write the files derived from the declaration (:mod:`orders.catalog`), or check that they are up to date.

    python -m orders.generate            # rewrite them (make generate)
    python -m orders.generate --check    # exit 1 naming every file that is behind (tests/test_generated.py)

The files, relative to the repository root:

- ``local/servicebus-config.json``: every queue of the deployed workflows with the properties of its kind
  (:func:`engine.queues.queue_properties`), in the official Service Bus emulator's ``Config.json`` shape,
  read by the bundled emulator and by Microsoft's (``docker-compose.yml``);
- ``infra/app/catalog.json``: the services by name (queue, URL setting, agent function) and the same
  queues with their properties as the Service Bus module takes them, read by the Bicep with
  ``loadJsonContent``;
- ``local.settings.sample.json``: its other values kept, one ``<NAME>_SERVICE_URL`` per service, and one
  entry per wait's setting (a new one short, :data:`SAMPLE_WAIT_SECONDS`);
- ``docs/customizing.md``: the tables between its generated markers (:mod:`orders.catalog_docs`): each
  workflow version's input fields and steps (their conditions, the results their services return and
  their bodies read, what undoes them, or that nothing can), and the services.

Output is deterministic (insertion-ordered keys, two-space indent, a final newline), so the check compares
text exactly.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from engine import APPROVAL, TIMER, WorkflowCatalog, queues, wait_seconds

from . import catalog_docs
from .catalog import CATALOG, SERVICES
from .services.declaration import ServiceDefinition

ROOT = Path(__file__).resolve().parents[2]

EMULATOR_CONFIG = "local/servicebus-config.json"
BICEP_CATALOG = "infra/app/catalog.json"
SAMPLE_SETTINGS = "local.settings.sample.json"
CUSTOMIZING_DOC = "docs/customizing.md"
# Every file the generator writes, wholly or in its generated part; paths relative to the root.
GENERATED = (EMULATOR_CONFIG, BICEP_CATALOG, SAMPLE_SETTINGS, CUSTOMIZING_DOC)

COMMAND = "python -m orders.generate"
# The official emulator accepts this namespace name only.
EMULATOR_NAMESPACE = "sbemulatorns"
# Where the local stack serves the simulators (remote-simulators and orders-devhost --sim-port default).
LOCAL_SIMULATORS_URL = "http://127.0.0.1:7072"
# A wait's setting new to the sample: at most this many seconds, by the wait's kind, so that an order run
# with Core Tools on a laptop is seen waiting and going on (the Bicep sets the declared durations).
SAMPLE_WAIT_SECONDS = {TIMER: 5.0, APPROVAL: 60.0}
# A key only Bicep reads; the emulators' config and the sample settings carry no note: the official
# emulator and Core Tools read those, and neither documents that unknown keys are ignored.
NOTE = (
    f"Generated from src/orders/catalog.py by `{COMMAND}` (make generate): edit the declaration, not this "
    "file. Read by infra/app/servicebus.bicep and infra/app/function-app.bicep (loadJsonContent)."
)


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(word.title() for word in rest)


def _pascal(snake: str) -> str:
    return "".join(word.title() for word in snake.split("_"))


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def queue_names(catalog: WorkflowCatalog) -> list[str]:
    """Every queue the deployed workflows use, in :func:`engine.queues.all_queues` order."""
    return queues.all_queues(catalog.agents)


def emulator_config(catalog: WorkflowCatalog) -> dict[str, Any]:
    """The emulators' ``Config.json``: one namespace with every queue."""
    entries = []
    for name in queue_names(catalog):
        properties = asdict(queues.queue_properties(name))
        emulator = {_pascal(key): value for key, value in properties.items()}
        # The official emulator's sample config sets both forwards, empty: no auto-forwarding.
        emulator |= {"ForwardDeadLetteredMessagesTo": "", "ForwardTo": ""}
        entries.append({"Name": name, "Properties": dict(sorted(emulator.items()))})
    namespace = {"Name": EMULATOR_NAMESPACE, "Queues": entries, "Topics": []}
    return {"UserConfig": {"Namespaces": [namespace], "Logging": {"Type": "File"}}}


def bicep_catalog(services: Sequence[ServiceDefinition], catalog: WorkflowCatalog) -> dict[str, Any]:
    """What the Bicep reads: the services, and the queues as the Service Bus module's ``queues`` items."""
    return {
        "$comment": NOTE,
        # By name, so that the Bicep looks a SERVICE_URLS name up and ARM refuses a name not declared.
        "services": {
            service.name: {
                "name": service.name,
                "queue": queues.agent_queue(service.name),
                "urlSetting": service.url_setting,
                "functionName": service.function_name,
            }
            for service in services
        },
        "queues": [
            {"name": name}
            | dict(sorted((_camel(k), v) for k, v in asdict(queues.queue_properties(name)).items()))
            for name in queue_names(catalog)
        ],
        # The app settings the waits name, each with its declared duration in seconds (the app's value
        # in Azure; the devhost sets short ones).
        "waits": {name: f"{seconds:g}" for name, seconds in catalog.wait_settings().items()},
        # The settings holding the callback secrets of the services that answer later: the predeploy
        # hook makes each once (infra/hooks/predeploy.sh), so the services' secrets survive deployments.
        "callbackSecrets": [s.callback_secret_setting for s in services if s.callback_secret_setting],
    }


def sample_settings(
    current: dict[str, Any], services: Sequence[ServiceDefinition], catalog: WorkflowCatalog = CATALOG
) -> dict[str, Any]:
    """``current`` (the sample as it is) with one URL setting per service where the first one stands, and
    one entry per wait's setting.

    A service's existing entry keeps its value; a new one points at the local simulators; an entry of a
    service no longer declared goes. A wait's existing entry keeps its value; a new one is added, short.
    """
    values: dict[str, Any] = dict(current.get("Values", {}))
    for name, wait in catalog.setting_waits().items():
        if name not in values:
            values[name] = f"{min(wait_seconds(wait), SAMPLE_WAIT_SECONDS[wait.kind]):g}"
    urls = {s.url_setting: values.get(s.url_setting, LOCAL_SIMULATORS_URL) for s in services}
    result: dict[str, Any] = {}
    placed = False
    for key, value in values.items():
        if key.endswith(ServiceDefinition.URL_SETTING_SUFFIX):
            if not placed:
                result |= urls
                placed = True
        else:
            result[key] = value
    if not placed:
        result |= urls
    return {"IsEncrypted": False, **current, "Values": result}


def render(
    root: Path = ROOT,
    services: Sequence[ServiceDefinition] = SERVICES,
    catalog: WorkflowCatalog = CATALOG,
) -> dict[str, str]:
    """The text every generated file must have, by path relative to ``root``. A docs page that is not
    there is left out (it is documentation, not configuration)."""
    sample_path = root / SAMPLE_SETTINGS
    current = json.loads(sample_path.read_text(encoding="utf-8")) if sample_path.is_file() else {}
    texts = {
        EMULATOR_CONFIG: _dump(emulator_config(catalog)),
        BICEP_CATALOG: _dump(bicep_catalog(services, catalog)),
        SAMPLE_SETTINGS: _dump(sample_settings(current, services, catalog)),
    }
    doc = root / CUSTOMIZING_DOC
    if doc.is_file():
        table = catalog_docs.render(tuple(services), catalog)
        texts[CUSTOMIZING_DOC] = catalog_docs.update(doc.read_text(encoding="utf-8"), table)
    return texts


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8").replace("\r\n", "\n") if path.is_file() else None


def stale(
    root: Path = ROOT,
    services: Sequence[ServiceDefinition] = SERVICES,
    catalog: WorkflowCatalog = CATALOG,
) -> list[str]:
    """The generated files under ``root`` that are missing or differ from the declaration's."""
    return [name for name, text in render(root, services, catalog).items() if _read(root / name) != text]


def write(
    root: Path = ROOT,
    services: Sequence[ServiceDefinition] = SERVICES,
    catalog: WorkflowCatalog = CATALOG,
) -> list[str]:
    """Rewrite the generated files under ``root`` that are behind; return their paths."""
    written = []
    for name, text in render(root, services, catalog).items():
        path = root / name
        if _read(path) != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
            written.append(name)
    return written


def stale_message(names: Sequence[str]) -> str:
    """What ``--check`` prints when files are behind."""
    listed = "\n".join(f"  {name}" for name in names)
    return (
        f"generated from src/orders/catalog.py and out of date:\n{listed}\n"
        f"run `{COMMAND}` (or `make generate`) and commit the result"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=COMMAND, description="Write the files derived from src/orders/catalog.py, or check them."
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is behind")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    if args.check:
        behind = stale(args.root)
        if behind:
            print(stale_message(behind), file=sys.stderr)
            return 1
        print(f"generated files up to date: {', '.join(render(args.root))}")
        return 0
    written = write(args.root)
    print(f"wrote {', '.join(written)}" if written else "generated files already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
