"""The operator console in a real headless Chromium against the local stack with the roles enforced
(``orders-devhost --auth roles``): a person signs in at the sign-in page, as with App Service
authentication, and the page works with that session; an operator can act, a reader sees no actions but
everything else: an order's input, a step left out by its condition with its reason, the values steps
returned, and the declared workflows with their input fields. An order that waits for an approval is shown
with its deadline; an approver approves it in the page, and sees no other action.

The browser is Debian's ``chromium`` driven through its ``chromedriver``; without them these tests are
skipped (``apt-get install chromium chromium-driver``). ``CONSOLE_SCREENSHOT=docs/console.png`` saves
the page with a running order and an order in Error to that path; ``TIMELINE_SCREENSHOT=docs/timeline.png``
an order's timeline with a step the Supervisor sent again, and one call's details open.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from engine.workflow import Approval, StepDefinition, WorkflowDefinition
from orders.catalog import CATALOG
from tests.e2e.conftest import (
    FIRST_STEP,
    WORKFLOWS,
    LocalStack,
    returned,
    runs_on,
    start_stack,
    stop_stack,
)
from tests.e2e.test_deadletters import QUEUE, dead_lettered, poison
from tests.e2e.test_retention import kept_as
from tests.support import wait_for

HANG = {"hangRate": 1, "hangMs": 60_000}
FIRST = FIRST_STEP.name  # the step an order hangs at: its service hangs
ROOT = Path(__file__).resolve().parents[2]
# The approvals' deadlines (FAST_SETTINGS has seconds: too short for a person in a browser, or a test).
REVIEW = {
    step.wait.setting: "120"
    for workflow in WORKFLOWS
    for step in workflow.steps
    if isinstance(step.wait, Approval) and step.wait.setting
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """This module's stack enforces the roles, as Azure does; its ``api`` client acts as the operator
    (``calm`` from conftest builds on it)."""
    running = start_stack(tmp_path_factory.mktemp("devhost"), workers=2, auth="roles", extra_env=REVIEW)
    try:
        yield running
    finally:
        stop_stack(running)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    """Headless Chromium with a fresh profile, stopped through its driver."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip(
            "the console tests need Chromium and its driver: apt-get install chromium chromium-driver"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-dev-shm-usage",
        "--window-size=1400,1400",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=driver, log_output=str(tmp_path / "chromedriver.log"))
    chrome = webdriver.Chrome(options=options, service=service)
    try:
        yield chrome
    finally:
        chrome.quit()


def open_console(browser: WebDriver, stack: LocalStack, role: str = "operator") -> None:
    """Open the console as a person would: refused, follow its sign-in link, sign in, and back."""
    browser.get(f"{stack.devhost.api_url}/api/console")
    browser.find_element(By.LINK_TEXT, "Sign in").click()
    wait_for(lambda: browser.find_elements(By.ID, "key"), timeout=10, what="the sign-in form")
    # The one complaint so far is the refusal itself (reading the log empties it).
    complaints = problems(browser)
    assert all("401" in entry["message"] for entry in complaints), complaints
    browser.find_element(By.ID, "key").send_keys(stack.devhost.keys[role])
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: urlsplit(browser.current_url).path == "/api/console", timeout=10, what="the console")
    assert not urlsplit(browser.current_url).query, "no key, nothing at all, in the console's address"
    wait_for(
        lambda: int(browser.find_element(By.TAG_NAME, "body").get_attribute("data-refreshes") or 0) >= 1,
        timeout=20,
        what="the console's first refresh",
    )


def problems(browser: WebDriver) -> list[dict[str, Any]]:
    """Errors and warnings in the browser's log."""
    return [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


def cell(browser: WebDriver, order_id: str, step: str) -> WebElement:
    return browser.find_element(
        By.CSS_SELECTOR, f'#inflight tr[data-order="{order_id}"] td[data-step="{step}"]'
    )


def status(browser: WebDriver) -> str:
    return browser.find_element(By.ID, "status").text


def audit(stack: LocalStack, order_id: str) -> list[dict[str, Any]]:
    response = stack.api.get(f"/api/orders/{order_id}/audit")
    assert response.status_code == 200, response.text
    return response.json()["items"]


def held(stack: LocalStack, order_id: str) -> dict[str, Any]:
    """The order once its first step hangs, given ten minutes more so nothing else moves it meanwhile."""
    stack.wait_state(order_id, lambda o: o["steps"][0]["state"] == "Running", what="a hung step")
    extended = stack.act(order_id, f"steps/{FIRST}/extend", {"seconds": 600, "note": "hold"})
    assert extended.status_code == 202, extended.text
    return extended.json()


def open_order(browser: WebDriver, order_id: str) -> None:
    field = browser.find_element(By.ID, "order-id")
    field.clear()
    field.send_keys(order_id)
    browser.find_element(By.CSS_SELECTOR, "#open-order button[type=submit]").click()
    # The heading names the order and the workflow version it runs.
    heading = re.compile(rf"^Order {re.escape(order_id)} \([a-z0-9-]+ v\d+\)$")
    wait_for(lambda: heading.match(browser.find_element(By.ID, "order-heading").text), timeout=10)


def confirm(browser: WebDriver, seconds: int | None = None, note: str | None = None) -> None:
    dialog = browser.find_element(By.ID, "confirm")
    wait_for(lambda: dialog.get_attribute("open") is not None, timeout=5, what="the confirmation")
    if seconds is not None:
        box = browser.find_element(By.ID, "confirm-seconds")
        box.clear()
        box.send_keys(str(seconds))
    if note is not None:
        browser.find_element(By.ID, "confirm-note").send_keys(note)
    browser.find_element(By.ID, "confirm-ok").click()


def left_out(order_id: str) -> tuple[WorkflowDefinition, dict[str, Any], list[StepDefinition]] | None:
    """A declared example input whose order ``order_id`` leaves steps out by their conditions, and those
    steps (in the examples here: fulfilment's all-digital order, which has no shipment); None if none does."""
    for workflow in WORKFLOWS:
        for example in workflow.examples():
            ran = runs_on(workflow, example, order_id)
            if skipped := [step for step in workflow.steps if step not in ran]:
                return workflow, example, skipped
    return None


def fresh_id() -> str:
    return f"o-{uuid.uuid4().hex[:12]}"


def submit_example(
    stack: LocalStack, workflow: WorkflowDefinition, example: dict[str, Any], order_id: str | None = None
) -> str:
    """Submit a declared example input as it is, naming its workflow unless it is the default."""
    order_id = order_id or fresh_id()
    named = {} if workflow.name == CATALOG.default else {"workflow": workflow.name}
    response = stack.api.post("/api/orders", json={"orderId": order_id, **named, **example})
    assert response.status_code == 202, response.text
    return order_id


def awaiting_approval(order_id: str) -> tuple[WorkflowDefinition, dict[str, Any], StepDefinition]:
    """A declared example input whose order ``order_id`` waits for a person's approval, and the step that
    waits (here: fulfilment's order above 1000 and its fraud review)."""
    for workflow in WORKFLOWS:
        for example in workflow.examples():
            for step in runs_on(workflow, example, order_id):
                if isinstance(step.wait, Approval):
                    return workflow, example, step
    pytest.skip("no declared example input waits for an approval")


def waiting_for_approval(stack: LocalStack) -> tuple[dict[str, Any], StepDefinition]:
    """An order submitted and waiting for its approval (before any fault: its first steps must run), and
    the step that waits."""
    order_id = fresh_id()
    workflow, example, step = awaiting_approval(order_id)
    submit_example(stack, workflow, example, order_id)
    order = stack.wait_state(
        order_id,
        lambda o: o["processState"] == "Waiting" and o["waitingFor"] == "approval",
        timeout=30,
        what="the wait for an approval",
    )
    assert order["waitUntil"] and [s["name"] for s in order["steps"] if s["state"] == "Waiting"] == [
        step.name
    ]
    return order, step


def approval_rows(browser: WebDriver, order_id: str) -> list[WebElement]:
    """The order's row among those waiting for approval (none while it is not there)."""
    return browser.find_elements(By.CSS_SELECTOR, f'#approvals tr[data-order="{order_id}"]')


def see_the_wait(browser: WebDriver, order: dict[str, Any]) -> None:
    """The order is listed as waiting for approval with its deadline ticking, and in flight as Waiting
    with what it waits for and until when."""
    [row] = wait_for(lambda: approval_rows(browser, order["orderId"]), timeout=15, what="the approval's row")
    assert "Waiting" in row.find_element(By.CSS_SELECTOR, ".state-Waiting").text
    clock = row.find_element(By.CSS_SELECTOR, "time[data-deadline]")
    assert clock.get_attribute("datetime") == order["waitUntil"] and clock.text.endswith("left"), clock.text
    flight = browser.find_element(By.CSS_SELECTOR, f'#inflight tr[data-order="{order["orderId"]}"]')
    assert flight.find_element(By.CSS_SELECTOR, ".state-Waiting").text == "Waiting"
    waits = flight.find_element(By.CSS_SELECTOR, 'td.waits [data-waiting-for="approval"]')
    assert waits.text.startswith("approval by ") and waits.text.endswith("left"), waits.text


# The page's fetch, answering for one made-up order (arguments[0]) in Error whose approval's deadline has
# passed: listed first among the orders in Error, and read by its id (with no audit).
OVERDUE_STUB = """
const order = arguments[0];
const real = window.fetch;
const json = (body) => new Response(JSON.stringify(body),
  { status: 200, headers: { "content-type": "application/json", etag: '"stub"' } });
window.fetch = async (url, init) => {
  const { pathname, search } = new URL(url, location.href);
  if (pathname.endsWith(`/orders/${order.orderId}`)) return json(order);
  if (pathname.endsWith(`/orders/${order.orderId}/audit`)) return json({ items: [] });
  const answer = await real(url, init);
  if (!pathname.endsWith("/orders") || !search.includes("processState=Error")) return answer;
  const page = await answer.json();
  const { steps, input, ...summary } = order;
  return json({ ...page, items: [summary, ...page.items] });
};
"""


def see_an_overdue_approval(browser: WebDriver, waiting: dict[str, Any], step: str) -> None:
    """An order in Error whose approval's deadline passed (an approval declared ``on_deadline="error"``;
    the declared workflows have none, so the page's fetch makes one up from a waiting order) is listed
    in Error and among the approvals as overdue, and can still be approved."""
    order = {
        **waiting,
        "orderId": f"o-overdue-{uuid.uuid4().hex[:6]}",
        "processState": "Error",
        "waitUntil": "2020-01-01T00:00:00+00:00",
        "lastError": f"{step}: no approval by its deadline",
    }
    browser.execute_script(OVERDUE_STUB, order)
    browser.find_element(By.ID, "refresh").click()
    [row] = wait_for(lambda: approval_rows(browser, order["orderId"]), timeout=10, what="the overdue row")
    assert row.find_element(By.CSS_SELECTOR, ".state-Error").text == "Error"
    assert row.find_element(By.CSS_SELECTOR, "time.overdue").text.endswith("overdue")
    error = browser.find_element(By.CSS_SELECTOR, f'#errors tr[data-order="{order["orderId"]}"] td.waits')
    assert error.text.startswith("approval by ") and error.text.endswith("overdue"), error.text
    open_order(browser, order["orderId"])
    summary = browser.find_element(By.ID, "order-summary")
    assert summary.find_element(By.CSS_SELECTOR, "[data-overdue]").text.startswith("overdue")
    assert browser.find_elements(By.CSS_SELECTOR, f'button[aria-label="Approve step {step}"]')


def buttons(browser: WebDriver) -> list[str]:
    """What the page's buttons say (their accessible names).

    Read in one script: the page re-renders on its refresh, and a button found in one
    WebDriver call can be gone by the next (a stale element).
    """
    names = browser.execute_script(
        "return [...document.querySelectorAll('button')]"
        ".map(b => b.getAttribute('aria-label') || b.innerText);"
    )
    return [str(n) for n in names]


def look(element: WebElement) -> tuple[str, ...]:
    """How a state reads on screen: its colour, font style and weight, and border."""
    return tuple(
        element.value_of_css_property(p) for p in ("color", "font-style", "font-weight", "border-top-style")
    )


def see_the_workflows(browser: WebDriver) -> None:
    """The Workflows panel lists each declared workflow's current version with its input fields: every
    required one as required, and every input field a condition reads (what the input model derives from
    them is no input field)."""
    wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, "#workflows article[data-workflow]"),
        timeout=10,
        what="the workflows",
    )
    shown = {
        a.get_attribute("data-workflow"): a
        for a in browser.find_elements(By.CSS_SELECTOR, "#workflows article[data-workflow]")
    }
    assert set(shown) == {w.name for w in WORKFLOWS}
    for workflow in WORKFLOWS:
        article = shown[workflow.name]
        assert article.find_element(By.TAG_NAME, "h3").text == f"{workflow.name} v{workflow.version}"
        assert workflow.input is not None
        rows = {
            r.get_attribute("data-field"): r.text
            for r in article.find_elements(By.CSS_SELECTOR, "tbody tr[data-field]")
        }
        for name, field in workflow.input.model_fields.items():
            alias = field.alias or name
            assert alias in rows, (workflow.name, alias, rows)
            assert ("optional" if not field.is_required() else "required") in rows[alias]
        read = {p.removeprefix("input.") for s in workflow.steps if s.when for p in s.when.fields()}
        # What the input model derives (fulfilment's total) is stored with the input, but no client sends it.
        derived = set(workflow.input.model_computed_fields)
        assert {p for p in read if not p.startswith("results.")} - derived <= set(rows), (read, rows)


def see_left_out_steps(
    browser: WebDriver, order: dict[str, Any], skipped: list[StepDefinition]
) -> tuple[str, ...]:
    """The order shows its input as stored, each left-out step with its state and the reason the API
    gives, and the values each step returned; answers how a left-out state looks."""
    open_order(browser, order["orderId"])
    assert "input" in order, "GET /api/orders/{orderId} answers no input: the console has none to show"
    shown = browser.find_element(By.ID, "order-input").text
    assert json.loads(shown) == order["input"]
    workflow = CATALOG.find(order["workflow"], order["workflowVersion"])
    assert workflow is not None, order
    declared = {s.name: s for s in workflow.steps}
    looks: dict[str, set[tuple[str, ...]]] = {}
    for step in order["steps"]:
        row = browser.find_element(By.CSS_SELECTOR, f'#order-steps tr[data-step="{step["name"]}"]')
        state = row.find_element(By.CSS_SELECTOR, f".state-{step['state']}")
        assert state.text == step["state"]
        looks.setdefault(step["state"], set()).add(look(state))
        definition = declared[step["name"]]
        if definition in skipped:
            assert step["state"] == "LeftOut" and step["result"] is None, step
            assert definition.when is not None and definition.when.describe() in step["reason"], step
            assert row.find_element(By.CSS_SELECTOR, "td.reason").text == step["reason"]
            continue
        if definition.wait is not None:  # a wait that ended: it called nothing and returned nothing
            assert step["state"] == "Completed" and not step["result"], step
            continue
        # A step that ran shows every value its service declares it returns, as the API gives them.
        assert step["state"] == "Completed" and set(step["result"] or {}) == set(
            returned(definition, order["orderId"])
        ), step
        for name, value in (step["result"] or {}).items():
            assert f"{name}: {value}" in row.find_element(By.CSS_SELECTOR, "td.result").text
    [left_out_look] = looks.pop("LeftOut")  # one look for every step left out...
    assert all(left_out_look not in other for other in looks.values()), looks  # ...unlike a step that ran
    return left_out_look


# ---- without a browser -------------------------------------------------------------------------------
class Addresses(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [str(v) for k, v in attrs if k in ("src", "href", "action", "formaction") and v]


def test_the_route_needs_a_signed_in_reader_or_operator_and_answers_a_self_contained_page(
    stack: LocalStack,
) -> None:
    url = f"{stack.devhost.api_url}/api/console"
    keys = stack.devhost.keys
    refused = httpx.get(url, timeout=10)
    assert (
        refused.status_code == 401 and "/.auth/login/aad?post_login_redirect_uri=/api/console" in refused.text
    )
    assert httpx.get(url, params={"code": keys["operator"]}, timeout=10).status_code == 401  # no key in URLs
    submitter = httpx.get(url, headers={"x-functions-key": keys["submitter"]}, timeout=10)
    assert submitter.status_code == 403 and submitter.json()["error"]["code"] == "Forbidden"
    page = httpx.get(url, headers={"x-functions-key": keys["operator"]}, timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<body data-actions="on" ' in page.text
    reader = httpx.get(url, headers={"x-functions-key": keys["reader"]}, timeout=10)
    assert reader.status_code == 200 and '<body data-actions="off" ' in reader.text
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert page.headers["cache-control"] and page.headers["x-content-type-options"] == "nosniff"
    assert all(key not in page.text for key in keys.values())
    assert "ORDER_RETENTION" in page.text  # what the finished states' counts cover
    parser = Addresses()
    parser.feed(page.text)
    assert parser.found and all(a.startswith("#") or a == "data:," for a in parser.found), parser.found
    again = httpx.get(
        url, headers={"x-functions-key": keys["operator"], "if-none-match": page.headers["etag"]}, timeout=10
    )
    assert again.status_code == 304


def test_order_counts_count_the_stacks_orders(stack: LocalStack) -> None:
    def by_state() -> dict[str, int]:
        counts = stack.api.get("/api/order-counts")
        assert counts.status_code == 200, counts.text
        assert counts.json()["atLeast"] is False
        return {i["processState"]: i["count"] for i in counts.json()["items"]}

    before = by_state()
    order_id = stack.submit()
    stack.wait_terminal(order_id)
    assert by_state()["Processed"] == before["Processed"] + 1
    # Counted and listed the same once the Supervisor has moved it to the history (a step's budget on).
    wait_for(lambda: kept_as(stack, order_id) == "archive", timeout=15, what="the move to the history")
    assert by_state()["Processed"] == before["Processed"] + 1
    listing = stack.api.get("/api/orders", params={"processState": "Processed", "pageSize": 100}).json()
    assert order_id in [o["orderId"] for o in listing["items"]]


# ---- in the browser ----------------------------------------------------------------------------------
@pytest.mark.usefixtures("calm")
def test_the_console_shows_running_and_failed_orders_live(stack: LocalStack, browser: WebDriver) -> None:
    waiting, review = waiting_for_approval(stack)
    stack.faults(**{FIRST_STEP.call_agent: HANG})
    failed = stack.submit()  # three timeouts of its first step: Error
    stack.wait_state(failed, lambda o: o["processState"] == "Error", timeout=90, what="the order in Error")
    hung = stack.submit()
    held(stack, hung)

    open_console(browser, stack)
    wait_for(lambda: "Running" in cell(browser, hung, FIRST).text, timeout=15, what="the row")
    step = cell(browser, hung, FIRST)
    assert "attempts 1" in step.text
    clock = step.find_element(By.CSS_SELECTOR, "time[data-deadline]")
    first = clock.text
    assert first.endswith(("left", "overdue"))
    wait_for(lambda: clock.text != first, timeout=5, what="the countdown to tick")
    row = browser.find_element(By.CSS_SELECTOR, f'#errors tr[data-order="{failed}"]')
    assert stack.order(failed)["lastError"] in row.text
    counts = {
        r.find_element(By.TAG_NAME, "th").text: r.find_element(By.TAG_NAME, "td").text
        for r in browser.find_elements(By.CSS_SELECTOR, "#counts tbody tr")
    }
    assert int(counts["Error"]) >= 1 and int(counts["Processing"]) >= 1 and int(counts["Waiting"]) >= 1
    see_the_wait(browser, waiting)
    # One row per agent, in workflow order, each with a state the API knows.
    breakers = browser.find_elements(By.CSS_SELECTOR, "#breakers tbody tr")
    assert [r.find_element(By.TAG_NAME, "th").text for r in breakers] == [
        b["service"] for b in stack.api.get("/api/breakers").json()["breakers"]
    ]
    assert all(
        r.find_elements(By.TAG_NAME, "td")[0].text in {"closed", "open", "half-open"} for r in breakers
    )
    if target := os.environ.get("CONSOLE_SCREENSHOT"):
        open_order(browser, hung)
        browser.execute_script("window.scrollTo(0, 0)")
        for _ in range(2):  # the window to the page's height, measured at that width
            height = browser.execute_script("return document.documentElement.scrollHeight")
            browser.set_window_size(1400, min(int(height) + 120, 3000))
        assert browser.save_screenshot(str(ROOT / target))
    assert problems(browser) == []
    approved = stack.act(waiting["orderId"], f"steps/{review.name}/approve")  # its review done: it ends
    assert approved.status_code == 202, approved.text


@pytest.mark.usefixtures("calm")
def test_an_action_confirmed_in_the_page_changes_the_order(stack: LocalStack, browser: WebDriver) -> None:
    stack.faults(**{FIRST_STEP.call_agent: HANG})
    order_id = stack.submit()
    before = held(stack, order_id)["steps"][0]["completeBy"]
    open_console(browser, stack)
    open_order(browser, order_id)

    browser.find_element(By.CSS_SELECTOR, f'button[aria-label="Extend step {FIRST}"]').click()
    browser.find_element(By.ID, "confirm-cancel").click()  # changing one's mind changes nothing
    wait_for(lambda: status(browser) == "Nothing was changed.", timeout=5)
    assert [e["note"] for e in audit(stack, order_id)] == ["hold"]

    browser.find_element(By.CSS_SELECTOR, f'button[aria-label="Extend step {FIRST}"]').click()
    confirm(browser, seconds=120, note="the service is slow today")
    wait_for(
        lambda: "done" in status(browser), timeout=10, what=f"the action's answer, not {status(browser)!r}"
    )
    [_, extend] = [e for e in audit(stack, order_id) if e["action"] == "extend"]
    assert extend["note"] == "the service is slow today"
    assert extend["actor"].startswith("user:operator (devhost) oid:")  # the signed-in person
    assert stack.order(order_id)["steps"][0]["completeBy"] > before
    timeline = browser.find_element(By.ID, "order-timeline").text
    wait_for(
        lambda: "the service is slow today" in browser.find_element(By.ID, "order-timeline").text, timeout=5
    )
    assert "submitted" in timeline and "hold" in timeline
    assert problems(browser) == []


@pytest.mark.usefixtures("calm")
def test_a_stale_page_is_told_to_reload_and_changes_nothing(stack: LocalStack, browser: WebDriver) -> None:
    stack.faults(**{FIRST_STEP.call_agent: HANG})
    order_id = stack.submit()
    held(stack, order_id)
    open_console(browser, stack)
    open_order(browser, order_id)

    changed = stack.act(order_id, f"steps/{FIRST}/extend", {"seconds": 60, "note": "from the API"})
    assert changed.status_code == 202, changed.text
    browser.find_element(By.ID, "order-cancel").click()
    confirm(browser)
    wait_for(
        lambda: "changed since you loaded it; reload" in status(browser), timeout=10, what="the 412 message"
    )
    assert [e["note"] for e in audit(stack, order_id)] == ["hold", "from the API"]  # no cancel
    assert stack.order(order_id)["processState"] == "Processing"
    # Reloaded: the page now holds the current version, the API's change on its timeline.
    wait_for(lambda: "from the API" in browser.find_element(By.ID, "order-timeline").text, timeout=5)
    stack.act(order_id, "cancel")


@pytest.mark.usefixtures("calm")
def test_dead_letter_counts_show_and_a_replay_is_confirmed(stack: LocalStack, browser: WebDriver) -> None:
    message_id = poison(stack, {"garbage": True})
    message = dead_lettered(stack, message_id)
    open_console(browser, stack)
    row = browser.find_element(By.CSS_SELECTOR, f'#deadletters tr[data-queue="{QUEUE}"]')
    assert int(row.find_element(By.TAG_NAME, "td").text.rstrip("+")) >= 1
    row.find_element(By.TAG_NAME, "button").click()
    label = f"Replay message {message['sequenceNumber']} of {QUEUE}"
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, f'button[aria-label="{label}"]'), timeout=10)
    browser.find_element(By.CSS_SELECTOR, f'button[aria-label="{label}"]').click()
    confirm(browser, note="checked")
    wait_for(lambda: "replayed" in status(browser), timeout=15, what=f"the replay, not {status(browser)!r}")
    left = stack.api.get(f"/api/deadletters/{QUEUE}", params={"pageSize": 100}).json()["items"]
    assert message["sequenceNumber"] not in [m["sequenceNumber"] for m in left]


@pytest.mark.usefixtures("calm")
def test_a_reader_sees_everything_and_no_action(stack: LocalStack, browser: WebDriver) -> None:
    # An order whose condition leaves a step out, run to its end before the faults.
    found = left_out(quiet := fresh_id())
    finished = None
    if found:
        finished = stack.wait_terminal(submit_example(stack, found[0], found[1], quiet))
        assert finished["processState"] == "Processed", finished
    stack.faults(**{FIRST_STEP.call_agent: HANG})
    order_id = stack.submit()
    held(stack, order_id)
    message = dead_lettered(stack, poison(stack, {"garbage": True}))
    open_console(browser, stack, role="reader")
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-actions") == "off"
    wait_for(lambda: "Running" in cell(browser, order_id, FIRST).text, timeout=15, what="a row")
    see_the_workflows(browser)
    left_out_look = see_left_out_steps(browser, finished, found[2]) if found and finished else None
    open_order(browser, order_id)
    assert browser.find_element(By.ID, "order-summary").text  # the order is shown...
    steps = browser.find_element(By.ID, "order-steps")
    assert steps.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert steps.find_elements(By.TAG_NAME, "button") == []  # ...with no action on its steps
    if left_out_look:
        # A step left out looks like neither a step still to come nor one that failed or ran.
        states = {e.text: look(e) for e in steps.find_elements(By.CSS_SELECTOR, "tbody td [class^='state-']")}
        assert "NotStarted" in states and "Running" in states, states
        assert left_out_look not in states.values(), (left_out_look, states)
    for gone in ("order-resubmit", "order-cancel", "confirm"):
        assert browser.find_elements(By.ID, gone) == [], gone
    row = browser.find_element(By.CSS_SELECTOR, f'#deadletters tr[data-queue="{QUEUE}"]')
    row.find_element(By.TAG_NAME, "button").click()  # listing is reading: allowed
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#deadletter-items tbody tr th"), timeout=10)
    listed = browser.find_element(By.ID, "deadletter-items").text
    assert str(message["sequenceNumber"]) in listed
    assert browser.find_elements(By.CSS_SELECTOR, "#deadletter-items button") == []
    labels = buttons(browser)
    assert not [x for x in labels if x.split(" ")[0] in {"Retry", "Extend", "Skip", "Replay", "Resubmit"}]
    assert problems(browser) == []
    # And the API agrees: the reader's session cannot act even without the page.
    session = "; ".join(f"{c['name']}={c['value']}" for c in browser.get_cookies())
    etag = stack.api.get(f"/api/orders/{order_id}").headers["etag"]
    forged = httpx.post(
        f"{stack.devhost.api_url}/api/orders/{order_id}/cancel",
        headers={"cookie": session, "if-match": etag},
        timeout=10,
    )
    assert forged.status_code == 403
    assert stack.order(order_id)["processState"] == "Processing"
    stack.act(order_id, "cancel")


@pytest.mark.usefixtures("calm")
def test_an_approver_approves_in_the_page_and_a_reader_cannot(stack: LocalStack, browser: WebDriver) -> None:
    order, review = waiting_for_approval(stack)
    order_id = order["orderId"]
    # A reader sees what waits, until when, and no way to decide it.
    open_console(browser, stack, role="reader")
    see_the_wait(browser, order)
    open_order(browser, order_id)
    summary = browser.find_element(By.ID, "order-summary").text
    assert "Waiting for" in summary and f"an approval (step {review.name})" in summary, summary
    row = browser.find_element(By.CSS_SELECTOR, f'#order-steps tr[data-step="{review.name}"]')
    assert row.find_element(By.CSS_SELECTOR, ".state-Waiting").text == "Waiting"
    assert row.find_element(By.CSS_SELECTOR, "time[data-deadline]").text.endswith("left")
    assert browser.find_elements(By.CSS_SELECTOR, "#order-steps button") == []
    assert not [b for b in buttons(browser) if b.startswith(("Approve", "Reject"))]
    assert browser.find_elements(By.ID, "confirm") == []
    assert problems(browser) == []
    session = "; ".join(f"{c['name']}={c['value']}" for c in browser.get_cookies())
    etag = stack.api.get(f"/api/orders/{order_id}").headers["etag"]
    forged = httpx.post(
        f"{stack.devhost.api_url}/api/orders/{order_id}/steps/{review.name}/approve",
        headers={"cookie": session, "if-match": etag},
        timeout=10,
    )
    assert forged.status_code == 403

    # An approver: Approve and Reject on the step that waits, none of the operator's other actions.
    browser.delete_all_cookies()
    open_console(browser, stack, role="approver")
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-actions") == "approve"
    see_the_wait(browser, order)
    open_order(browser, order_id)
    steps = browser.find_element(By.ID, "order-steps")
    shown = [b.get_attribute("aria-label") for b in steps.find_elements(By.TAG_NAME, "button")]
    assert shown == [f"Approve step {review.name}", f"Reject step {review.name}"], shown
    assert not [
        b for b in buttons(browser) if b.split(" ")[0] in {"Retry", "Extend", "Skip", "Replay", "Resubmit"}
    ]
    for gone in ("order-resubmit", "order-cancel"):
        assert browser.find_elements(By.ID, gone) == [], gone
    browser.find_element(By.CSS_SELECTOR, f'button[aria-label="Approve step {review.name}"]').click()
    confirm(browser, note="reviewed: a known customer")
    wait_for(
        lambda: "done" in status(browser), timeout=10, what=f"the approval's answer, not {status(browser)!r}"
    )
    [approve] = [e for e in audit(stack, order_id) if e["action"] == "approve"]
    assert approve["note"] == "reviewed: a known customer" and approve["step"] == review.name
    assert approve["actor"].startswith("user:approver (devhost) oid:")  # the signed-in person
    # The page reloaded the order: the review done, nothing left to approve.
    wait_for(
        lambda: steps.find_elements(By.CSS_SELECTOR, f'tr[data-step="{review.name}"] .state-Completed'),
        timeout=5,
        what="the review shown done",
    )
    assert steps.find_elements(By.TAG_NAME, "button") == []
    assert stack.wait_terminal(order_id)["processState"] == "Processed"
    assert problems(browser) == []
    see_an_overdue_approval(browser, order, review.name)
    assert problems(browser) == []


@pytest.mark.usefixtures("calm")
def test_a_group_is_shown_side_by_side_and_one_of_its_steps_is_acted_on(
    stack: LocalStack, browser: WebDriver
) -> None:
    returns = CATALOG.current("order-return")
    assert returns is not None
    group = [s for s in returns.steps if s.group]
    hung = group[1]
    stack.faults(**{hung.call_agent: HANG})
    order_id = submit_example(stack, returns, returns.examples()[0])
    others = {s.name for s in group} - {hung.name}

    def others_done(order: dict[str, Any]) -> bool:
        states = {s["name"]: s["state"] for s in order["steps"]}
        return states[hung.name] == "Running" and all(states[n] == "Completed" for n in others)

    stack.wait_state(order_id, others_done, what="the group's other steps done, one hung")
    # An action on a step of the running group, by the API: its own CompleteBy, ten minutes more.
    extended = stack.act(order_id, f"steps/{hung.name}/extend", {"seconds": 600, "note": "hold"})
    assert extended.status_code == 202, extended.text
    assert extended.json()["processState"] == "Processing"
    open_console(browser, stack)
    open_order(browser, order_id)
    rows = browser.find_elements(By.CSS_SELECTOR, "#order-steps tbody tr")
    assert [r.get_attribute("data-step") for r in rows] == [s.name for s in returns.steps]
    assert [r.get_attribute("data-group") for r in rows] == [s.group for s in returns.steps]
    labels = [[e.text for e in r.find_elements(By.CSS_SELECTOR, ".group-name")] for r in rows]
    assert labels == [[f"side by side: {group[0].group}"] if s is group[0] else [] for s in returns.steps]
    # ...and in the page: the hung step is done by hand, and the group's join moves the order on.
    browser.find_element(By.CSS_SELECTOR, f'button[aria-label="Skip step {hung.name}"]').click()
    confirm(browser, note="restocked by hand")
    done = stack.wait_terminal(order_id)
    assert done["processState"] == "Processed", done
    [skip] = [e for e in audit(stack, order_id) if e["action"] == "skip"]
    assert (skip["step"], skip["processStateBefore"]) == (hung.name, "Processing")
    wait_for(
        lambda: (
            f"{hung.name} (side by side: {hung.group})" in browser.find_element(By.ID, "order-timeline").text
        ),
        timeout=10,
        what="the timeline naming the step and its group",
    )
    assert problems(browser) == []


# The chart's bars and marks as the page drew them: their data attributes and where they start on screen.
DRAWN = """
return [...document.querySelectorAll(arguments[0])].map(
  (node) => ({ ...node.dataset, left: node.getBoundingClientRect().left }));
"""


def drawn(browser: WebDriver, selector: str) -> list[dict[str, Any]]:
    return browser.execute_script(DRAWN, selector)


def retried_and_extended(stack: LocalStack) -> dict[str, Any]:
    """A finished order whose first step's first dispatch hung until the Supervisor sent the step again,
    and whose second dispatch an operator extended while it hung too, before the service came back (the
    call sent after the extension answered): dispatches of one step, a recovery, an operator's action, and
    a call with what it sent. Extended before the service is back, as the step is then sure to be current:
    extended after, the Supervisor's next call could answer and the order end first (seen on a busy
    machine: the extend answered 409, the order at its last step)."""
    service = FIRST_STEP.call_agent
    before = stack.hung_calls(service)
    stack.faults(**{service: HANG})
    order_id = stack.submit()

    def sent_again(order: dict[str, Any]) -> bool:
        calls = order["steps"][0]["calls"]
        return len(calls) >= 2 and bool(calls[0].get("recovery"))

    stack.wait_state(order_id, sent_again, timeout=30, what="the Supervisor sending the step again")
    stack.wait_hung(service, more_than=before + 1)  # the second call hangs too: it ends only when re-sent
    extended = stack.act(
        order_id, f"steps/{FIRST}/extend", {"seconds": 5, "note": "the service is coming back"}
    )
    assert extended.status_code == 202, extended.text
    stack.clear_faults()
    order = stack.wait_terminal(order_id)
    assert order["processState"] == "Processed", order
    return order


@pytest.mark.usefixtures("calm")
def test_the_timeline_draws_every_dispatch_and_shows_what_a_call_sent(
    stack: LocalStack, browser: WebDriver
) -> None:
    order = retried_and_extended(stack)
    order_id = order["orderId"]
    first = order["steps"][0]
    open_console(browser, stack)
    open_order(browser, order_id)
    # The order's trace id, to look it up in Application Insights (or orders-trace locally).
    assert order["traceId"] and browser.find_element(By.ID, "order-trace").text == order["traceId"]

    # One bar per dispatch kept, drawn from the times the API gives, in time order along the axis.
    bars = drawn(browser, "#chart .bar")
    calls = [(s["name"], c) for s in order["steps"] for c in s["calls"]]
    assert len(bars) == len(calls)
    assert len([b for b in bars if b["step"] == FIRST]) == len(first["calls"]) >= 2
    for bar, (step, call) in zip(bars, calls, strict=True):
        assert (bar["step"], int(bar["attempt"]), bar["kind"]) == (step, call["attempt"], call["kind"])
        assert (bar["start"], bar["end"]) == (call["dispatched"], call.get("ended") or ""), (bar, call)
        assert bar["outcome"] == (call.get("outcome") or "")
    by_time = sorted(bars, key=lambda b: datetime.fromisoformat(b["start"]))
    for earlier, later in itertools.pairwise(by_time):
        if earlier["start"] != later["start"]:
            assert earlier["left"] < later["left"], (earlier, later)
    # The Supervisor's recovery with its words, the operator's extension on the step's lane.
    recoveries = drawn(browser, '#chart [data-marker="recovery"]')
    assert {(m["step"], m["text"]) for m in recoveries} == {
        (s["name"], c["recovery"]) for s in order["steps"] for c in s["calls"] if c.get("recovery")
    }
    [extend] = [e for e in audit(stack, order_id) if e["action"] == "extend"]
    operators = drawn(browser, '#chart [data-marker="operator"]')
    assert [(m["step"], m["action"], m["actor"], m["at"]) for m in operators] == [
        (FIRST, "extend", extend["actor"], extend["at"])
    ]
    assert drawn(browser, f'#chart [data-marker="started"][data-step="{FIRST}"]')

    # The call that answered: what it sent and what came back, shown when its bar is chosen.
    answered = next(c for c in first["calls"] if c.get("body"))
    bar = browser.find_element(
        By.CSS_SELECTOR, f'#chart .bar[data-step="{FIRST}"][data-attempt="{answered["attempt"]}"]'
    )
    bar.click()
    detail = browser.find_element(By.ID, "call-detail")
    wait_for(detail.is_displayed, timeout=5, what="the call's details")
    assert json.loads(browser.find_element(By.ID, "call-body").text) == answered["body"]
    facts = {
        dd.get_attribute("data-fact"): dd for dd in detail.find_elements(By.CSS_SELECTOR, "dd[data-fact]")
    }
    assert facts["instance"].text == answered["instance"]
    assert facts["status"].text == str(answered["status"])
    assert facts["outcome"].text == answered["outcome"]
    for fact in ("dispatched", "started", "ended"):
        assert facts[fact].find_element(By.TAG_NAME, "time").get_attribute("datetime") == answered[fact]
    assert bar.get_attribute("aria-expanded") == "true"
    if target := os.environ.get("TIMELINE_SCREENSHOT"):
        # The window as tall as the timeline and the call's details, the timeline at its top.
        to_top = "document.getElementById('order-chart').scrollIntoView(); scrollBy(0, -12)"
        browser.execute_script(to_top)
        for _ in range(2):
            height = browser.execute_script(
                "return document.getElementById('call-detail').getBoundingClientRect().bottom"
                " - document.getElementById('order-chart').getBoundingClientRect().top"
            )
            browser.set_window_size(1400, min(int(height) + 160, 3000))
            browser.execute_script(to_top)
        assert browser.save_screenshot(str(ROOT / target))
    assert problems(browser) == []


def found(browser: WebDriver) -> list[str]:
    return [r.get_attribute("data-order") for r in browser.find_elements(By.CSS_SELECTOR, "#found tbody tr")]


def search_done(browser: WebDriver) -> str:
    """What the search says once its reads are done (it says "Searching…" meanwhile)."""
    note = browser.find_element(By.ID, "found-note")
    return wait_for(
        lambda: note.text not in ("", "Searching…") and note.text, timeout=10, what="the search's answer"
    )


@pytest.mark.usefixtures("calm")
def test_orders_are_found_in_the_page_and_a_refused_search_says_why(
    stack: LocalStack, browser: WebDriver
) -> None:
    customer = f"customer-{uuid.uuid4().hex[:10]}"
    submitted = {stack.submit(customerId=customer) for _ in range(2)}
    stack.submit()  # another customer's order, not to be found

    def searched() -> set[str]:
        reply = stack.api.get("/api/orders", params={"customerId": customer, "pageSize": 100})
        assert reply.status_code == 200, reply.text
        return {o["orderId"] for o in reply.json()["items"]}

    wait_for(lambda: searched() == submitted, timeout=15, what="both orders found by the API")
    open_console(browser, stack)
    browser.find_element(By.ID, "find-customer").send_keys(customer)
    browser.find_element(By.ID, "find-submit").click()
    assert "found" in search_done(browser)
    more = browser.find_element(By.ID, "find-more")
    while more.is_displayed():  # a search's page may end early: read on to its end
        more.click()
        search_done(browser)
    assert sorted(found(browser)) == sorted(submitted)
    row = browser.find_element(By.CSS_SELECTOR, "#found tbody tr")
    assert row.find_element(By.CSS_SELECTOR, "td[data-current-step]").text
    row.find_element(By.TAG_NAME, "button").click()
    heading = browser.find_element(By.ID, "order-heading")
    wait_for(lambda: heading.text.startswith(f"Order {row.get_attribute('data-order')} "), timeout=10)

    assert problems(browser) == []

    # A step no workflow has: the API refuses, and the page says what the API said.
    browser.find_element(By.ID, "find-customer").clear()
    refused = stack.api.get("/api/orders", params={"step": "no-such-step"})
    assert refused.status_code == 400, refused.text
    browser.find_element(By.ID, "find-step").send_keys("no-such-step")
    browser.find_element(By.ID, "find-submit").click()
    note = search_done(browser)
    assert note == f"The search was refused: {refused.json()['error']['message']}", note
    assert browser.find_elements(By.CSS_SELECTOR, "#found tbody tr") == [] and not more.is_displayed()
    complaints = problems(browser)  # the browser logs the refusal itself, and nothing else
    assert complaints and all("status of 400" in c["message"] for c in complaints), complaints
