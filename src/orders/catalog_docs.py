"""The documentation's tables of the declared workflows and services, rendered from the catalog.

``docs/customizing.md`` holds them between ``<!-- generated: workflows -->`` and ``<!-- end generated -->``;
``python -m orders.generate`` rewrites that part and ``make test`` fails when it is behind.
"""

from __future__ import annotations

import re

from engine import queues
from engine.workflow import WorkflowCatalog

from .services.declaration import ServiceDefinition

BEGIN = "<!-- generated: workflows -->"
END = "<!-- end generated -->"


def render(services: tuple[ServiceDefinition, ...], catalog: WorkflowCatalog) -> str:
    """Markdown: every workflow version with its steps, then every service with its agent and resources."""
    lines: list[str] = []
    current = {name: catalog.current(name) for name in catalog.names}
    for workflow in catalog.workflows:
        latest = current[workflow.name] is workflow
        default = " (the default)" if workflow.name == catalog.default and latest else ""
        state = "new orders take it" if latest else "kept for the orders that started on it"
        title = f"**`{workflow.name}` version {workflow.version}**{default}"
        lines += [
            f"{title}: {workflow.description or '-'}; {state}.",
            "",
            "| # | step | service | action | undone by | budget (s) | tries per attempt |",
            "|---|---|---|---|---|---|---|",
        ]
        for i, step in enumerate(workflow.steps, 1):
            budget = step.complete_by_seconds if step.complete_by_seconds is not None else "default"
            undo = f"`{step.compensation}`" if step.compensation else "nothing"
            lines.append(
                f"| {i} | `{step.name}` | `{step.agent}` | `{step.action}` | {undo} | {budget} "
                f"| {step.retry.max_tries} |"
            )
        lines.append("")
    lines += [
        "| service | agent function | request queue | URL setting | resources (apply / undo) |",
        "|---|---|---|---|---|",
    ]
    for service in services:
        resources = ", ".join(f"{r.collection} (`{r.apply}` / `{r.undo}`)" for r in service.resources)
        lines.append(
            f"| `{service.name}` | `{service.function_name}` | `{queues.agent_queue(service.name)}` "
            f"| `{service.url_setting}` | {resources} |"
        )
    return "\n".join(lines) + "\n"


def update(markdown: str, table: str) -> str:
    """``markdown`` with the generated part replaced by ``table``; ValueError if it has no such part."""
    pattern = re.compile(rf"({re.escape(BEGIN)}\n).*?({re.escape(END)})", re.DOTALL)
    if not pattern.search(markdown):
        raise ValueError(f"no {BEGIN} ... {END} part to fill")
    return pattern.sub(lambda m: m.group(1) + table + m.group(2), markdown, count=1)
