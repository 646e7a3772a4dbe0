"""The console page as served: one self-contained document whose policy allows exactly its own parts."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html.parser import HTMLParser

from engine import operator_actions
from orders import console, openapi


class Parts(HTMLParser):
    """Every address the page refers to, and the text of its inline scripts and styles."""

    def __init__(self) -> None:
        super().__init__()
        self.addresses: list[str] = []
        self.inline: dict[str, list[str]] = {"script": [], "style": []}
        self.external: list[str] = []
        self._open: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        for name in ("src", "href", "action", "formaction", "srcset", "poster", "data"):
            if found.get(name) is not None:
                self.addresses.append(str(found[name]))
        if (tag == "link" and found.get("href") != "data:,") or (tag == "script" and "src" in found):
            self.external.append(tag)
        self._open = tag if tag in self.inline else None

    def handle_data(self, data: str) -> None:
        if self._open:
            self.inline[self._open].append(data)

    def handle_endtag(self, tag: str) -> None:
        self._open = None


class Marked(HTMLParser):
    """The ids of elements inside (or being) an element marked ``data-acts``, and how many table
    headers are so marked."""

    def __init__(self) -> None:
        super().__init__()
        self.inside: set[str] = set()
        self.columns = 0
        self.body_attrs: dict[str, str | None] = {}
        self._stack: list[tuple[str, bool]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "body":
            self.body_attrs = found
        marked = "data-acts" in found or any(m for _, m in self._stack)
        if marked and found.get("id"):
            self.inside.add(str(found["id"]))
        if tag == "th" and "data-acts" in found:
            self.columns += 1
        if tag not in ("input", "meta", "link", "br", "img"):
            self._stack.append((tag, marked))

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            if self._stack.pop()[0] == tag:
                break


class Ids(HTMLParser):
    """Every element id of the page, the in-page links, and the header cells of each table by its id."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: set[str] = set()
        self.headers: dict[str, list[str]] = {}
        self._table: str | None = None
        self._in_th = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        if tag == "a" and found.get("href"):
            self.links.add(str(found["href"]))
        if tag == "table":
            self._table = found.get("id")
        self._in_th = tag == "th"

    def handle_data(self, data: str) -> None:
        if self._in_th and self._table and data.strip():
            self.headers.setdefault(self._table, []).append(data.strip())

    def handle_endtag(self, tag: str) -> None:
        if tag == "th":
            self._in_th = False


def parts() -> Parts:
    parser = Parts()
    parser.feed(console.PAGE.body.decode())
    return parser


def digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def directives() -> dict[str, str]:
    policy = console.PAGE.headers["Content-Security-Policy"]
    return {d.split(" ", 1)[0]: d.split(" ", 1)[1] for d in (p.strip() for p in policy.split(";"))}


def test_the_page_loads_nothing_from_anywhere_else() -> None:
    found = parts()
    assert found.external == []  # no stylesheet, script or icon files at all
    assert all(a.startswith("#") or a == "data:," for a in found.addresses), found.addresses
    assert not re.search(r"https?://|//[a-z0-9]", console.PAGE.body.decode(), re.IGNORECASE)


def test_the_policy_allows_the_inline_script_and_style_by_hash_and_only_this_origin() -> None:
    found = parts()
    [script], [style] = found.inline["script"], found.inline["style"]
    policy = directives()
    assert policy["default-src"] == "'none'" and policy["connect-src"] == "'self'"
    assert policy["script-src"] == digest(script) and policy["style-src"] == digest(style)
    assert "unsafe" not in console.PAGE.headers["Content-Security-Policy"]
    assert policy["frame-ancestors"] == "'none'" and policy["form-action"] == "'none'"
    assert console.PAGE.headers["Referrer-Policy"] == "no-referrer"


def test_the_script_sends_no_key_and_reads_none_from_the_address() -> None:
    script = parts().inline["script"][0]
    # The browser's own session goes along (same origin); the page never handles a key.
    assert "location.search" not in script and "x-functions-key" not in script.lower()
    assert 'credentials: "same-origin"' in script
    assert "innerHTML" not in script and "document.write" not in script  # text only: nothing injected


def test_a_reader_gets_the_page_without_action_controls_and_its_own_etag() -> None:
    operator, reader = console.console({}, can_act=True), console.console({}, can_act=False)
    assert b'<body data-actions="on" ' in operator.body and b'<body data-actions="off" ' in reader.body
    assert operator.headers["ETag"] != reader.headers["ETag"]
    # Same script and style in both: the policy's hashes hold for either page.
    assert operator.headers["Content-Security-Policy"] == reader.headers["Content-Security-Policy"]
    script = parts().inline["script"][0]
    assert 'const CAN_ACT = document.body.dataset.actions === "on";' in script
    assert 'querySelectorAll("[data-acts]").forEach((node) => node.remove())' in script
    marked = Marked()
    marked.feed(reader.body.decode())
    # The order's buttons, the steps' and dead letters' action columns and the confirmation dialog go.
    assert {"order-resubmit", "order-cancel", "confirm"} <= marked.inside
    assert marked.columns == 2
    # A reader's copy is never taken for an operator's: each variant answers 304 to its own tag only.
    assert console.console({"if-none-match": reader.headers["ETag"]}, can_act=False).status == 304
    assert console.console({"if-none-match": reader.headers["ETag"]}, can_act=True).status == 200


def test_the_sign_in_page_links_to_the_platform_login_and_carries_no_script() -> None:
    page = console.SIGN_IN
    assert page.status == 401 and b'href="/.auth/login/aad?post_login_redirect_uri=/api/console"' in page.body
    assert b"<script" not in page.body and "default-src 'none'" in page.headers["Content-Security-Policy"]


def test_a_current_copy_is_not_sent_again() -> None:
    etag = console.PAGE.headers["ETag"]
    again = console.console({"if-none-match": etag})
    assert again.status == 304 and again.body == b"" and again.headers["ETag"] == etag
    assert console.console({"if-none-match": '"other"'}) is console.PAGE
    assert console.console({}).status == 200


def test_the_page_shows_an_order_s_input_its_steps_reasons_and_results_and_the_workflows() -> None:
    page = Ids()
    page.feed(console.PAGE.body.decode())
    assert {"order-input", "workflows", "workflows-heading"} <= page.ids
    assert "#workflows-heading" in page.links  # in the page's navigation
    columns = page.headers["order-steps"]
    assert columns.index("State") < columns.index("Reason") < columns.index("Result"), columns
    script = parts().inline["script"][0]
    # The workflows come from the API's document: the submission's one schema per workflow.
    assert 'call("GET", "openapi.json")' in script
    assert f"schemas.{openapi.SUBMISSION}.oneOf" in script
    assert "order.input" in script and "step.reason" in script and "resultValues(step.result)" in script


def rules(css: str) -> list[tuple[set[str], str]]:
    """(selectors, declarations) of each rule of a style sheet without nesting."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.DOTALL)
    return [
        ({s.strip() for s in selectors.split(",")}, body.strip())
        for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css)
    ]


def test_a_left_out_step_has_a_look_of_its_own() -> None:
    style = parts().inline["style"][0]
    found = rules(style)
    own = [body for selectors, body in found if ".state-LeftOut" in selectors]
    assert own and all(own), "no rule styles the LeftOut state"
    # Never grouped with a failure, a step that ran, or one still to come.
    for selectors, _ in found:
        if ".state-LeftOut" in selectors:
            assert not {".state-Failed", ".state-Error", ".state-Completed", ".state-NotStarted"} & selectors
    # Each step's row carries its state, so a left-out row can be told apart as a whole.
    assert any("tr.step-LeftOut" in selector for selectors, _ in found for selector in selectors)
    assert "`step-${step.state}`" in parts().inline["script"][0]


def test_the_page_takes_each_operator_action_s_shape_from_the_engine_s_table() -> None:
    """Where an action is posted and whether it asks for seconds or a note come from
    engine.operator_actions, not from the script."""
    marked = Marked()
    marked.feed(console.console({}, can_act=True).body.decode())
    declared = json.loads(marked.body_attrs["data-operator-actions"] or "")
    assert declared == {
        a.name: {
            "onStep": a.on_step,
            "seconds": a.takes_seconds,
            "note": a.note_required,
            "input": a.takes_input,
        }
        for a in operator_actions.ACTIONS
    }
    script = parts().inline["script"][0]
    assert 'verb === "extend"' not in script and 'verb === "skip"' not in script
