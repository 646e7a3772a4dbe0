"""The documentation's tables of the declared workflows and services, rendered from the catalog.

``docs/customizing.md`` holds them between ``<!-- generated: workflows -->`` and ``<!-- end generated -->``;
``python -m orders.generate`` rewrites that part and ``make test`` fails when it is behind.

Each workflow version shows its input (the fields of its input model, as the paths a condition reads after
``input.``) and its steps: the service and action, when the step runs (its condition, in the words of
:meth:`~engine.conditions.Test.describe`), the result values its service returns, the results its body
reads, and what undoes it (a step on a resource without undo cannot be undone).
"""

from __future__ import annotations

import json
import re
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from engine import StepDefinition, Update, WorkflowCatalog, WorkflowDefinition, queues

from .services.declaration import Resource, ServiceDefinition

BEGIN = "<!-- generated: workflows -->"
END = "<!-- end generated -->"
NONE = "—"
CANNOT_BE_UNDONE = f"{NONE} (cannot be undone)"
NOTHING_TO_UNDO = f"{NONE} (a wait: nothing to undo)"


def render(services: tuple[ServiceDefinition, ...], catalog: WorkflowCatalog) -> str:
    """Markdown: every workflow version with its input and steps, then every service with its agent and
    resources."""
    by_name = {service.name: service for service in services}
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
            _input_line(workflow),
            "",
            *_updates_lines(workflow.updates),
            "| # | step | service | action | runs | returns | reads | undone by | budget (s) "
            "| tries per attempt |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for i, step in enumerate(workflow.steps, 1):
            lines.append(_step_row(i, step, _resource_of(by_name, step)))
        lines.append("")
    lines += [
        "| service | agent function | request queue | URL setting | resources (apply / undo) |",
        "|---|---|---|---|---|",
    ]
    for service in services:
        resources = ", ".join(
            f"{r.collection} (`{r.apply}` / {f'`{r.undo}`' if r.undo else NONE}"
            + (f"; redacted in its record: {_names(list(r.body.sensitive))}" if r.body.sensitive else "")
            + ")"
            for r in service.resources
        )
        lines.append(
            f"| `{service.name}` | `{service.function_name}` | `{queues.agent_queue(service.name)}` "
            f"| `{service.url_setting}` | {resources} |"
        )
    return "\n".join(lines) + "\n"


def _resource_of(by_name: dict[str, ServiceDefinition], step: StepDefinition) -> Resource | None:
    """The resource ``step`` applies, or None when its service or action is not declared (the catalog
    refuses that at import; the tables are still rendered, to show what was declared)."""
    if not step.calls:
        return None
    service = by_name.get(step.call_agent)
    if service is None:
        return None
    try:
        resource, _ = service.resource(step.action or "")
    except KeyError:
        return None
    return resource


def _step_row(number: int, step: StepDefinition, resource: Resource | None) -> str:
    budget = step.complete_by_seconds if step.complete_by_seconds is not None else "default"
    runs = f"when `{step.when.describe()}`" if step.when is not None else "always"
    returns = _names(resource.result_names) if resource is not None else NONE
    reads = NONE
    if resource is not None:
        body = resource.body
        read = [f"`{name}`" for name in body.needs] + [f"`{name}` if returned" for name in body.may_use]
        reads = ", ".join(read) or NONE
    if step.wait is not None:
        return (
            f"| {number} | `{step.name}` | waits | {step.wait.kind}: {step.wait.describe()} | {runs} "
            f"| {NONE} "
            f"| {NONE} | {NOTHING_TO_UNDO} | {NONE} | {NONE} |"
        )
    undo = f"`{step.compensation}`" if step.compensation else CANNOT_BE_UNDONE
    return (
        f"| {number} | `{step.name}` | `{step.agent}` | `{step.action}` | {runs} | {returns} | {reads} "
        f"| {undo} | {budget} | {step.retry.max_tries} |"
    )


def _names(names: list[str]) -> str:
    return ", ".join(f"`{name}`" for name in names) or NONE


def _updates_lines(updates: tuple[Update, ...]) -> list[str]:
    """What an update of a running order may change, and until which step (nothing without updates)."""
    if not updates:
        return []
    each = "; ".join(
        f"{', '.join(f'`{field}`' for field in update.fields)} until step `{update.until}` starts"
        for update in updates
    )
    return [f"Updates (`POST /api/orders/{{orderId}}/update`) may change: {each}.", ""]


def _input_line(workflow: WorkflowDefinition) -> str:
    if workflow.input is None:
        return "Input: no input model declared."
    fields = "; ".join(input_fields(workflow.input))
    searchable = f" Found by: {_names(list(workflow.searchable))}." if workflow.searchable else ""
    sensitive = "".join(
        f" Sensitive: `{name}` (never shown; kept sealed "
        + (f"until `{until}` is done)." if until else "until the order ends).")
        for name, until in workflow.sensitive.items()
    )
    return (
        f"Input `{workflow.input.__name__}` (the order's fields besides `orderId` and `workflow`): {fields}."
        + searchable
        + sensitive
    )


def input_fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every field of an input model as the path a condition reads after ``input.`` (a list's elements
    through ``[]``), with its type in words, and ``optional`` or its default when it may be left out."""
    described: list[str] = []
    for name, field in model.model_fields.items():
        path = prefix + (field.alias or name)
        annotation, optional = _unwrap(field.annotation)
        if get_origin(annotation) in (list, tuple):
            (element, _) = _unwrap(get_args(annotation)[0])
            if isinstance(element, type) and issubclass(element, BaseModel):
                described += input_fields(element, f"{path}[].")
                continue
            kind = f"list of {_kind(element)}"
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            described += input_fields(annotation, f"{path}.")
            continue
        else:
            kind = _kind(annotation)
        if not field.is_required():
            default = field.get_default(call_default_factory=True)
            if default is None or default is PydanticUndefined:
                kind += ", optional"
            else:
                kind += f", default `{json.dumps(default)}`"
        elif optional:
            kind += " or null"
        described.append(f"`{path}` ({kind})")
    return described


def _kind(annotation: Any) -> str:
    """A field's type in words: text, integer, number, true/false, one of ..."""
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in get_args(annotation))
    words = {str: "text", int: "integer", float: "number", bool: "true/false"}
    if annotation in words:
        return words[annotation]
    return getattr(annotation, "__name__", str(annotation))


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """The type inside ``Annotated[...]`` and ``X | None``, and whether None is allowed."""
    optional = False
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
            continue
        if origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            optional = optional or len(args) < len(get_args(annotation))
            if len(args) == 1:
                annotation = args[0]
                continue
        return annotation, optional


def update(markdown: str, table: str) -> str:
    """``markdown`` with the generated part replaced by ``table``; ValueError if it has no such part."""
    pattern = re.compile(rf"({re.escape(BEGIN)}\n).*?({re.escape(END)})", re.DOTALL)
    if not pattern.search(markdown):
        raise ValueError(f"no {BEGIN} ... {END} part to fill")
    return pattern.sub(lambda m: m.group(1) + table + m.group(2), markdown, count=1)
