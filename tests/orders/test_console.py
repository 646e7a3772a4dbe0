"""The console page as served: one self-contained document whose policy allows exactly its own parts."""

from __future__ import annotations

import base64
import hashlib
import re
from html.parser import HTMLParser

from orders import console


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


def test_the_key_is_read_from_the_address_and_sent_as_a_header_never_written_into_the_page() -> None:
    script = parts().inline["script"][0]
    assert 'URLSearchParams(location.search).get("code")' in script
    assert 'headers["x-functions-key"] = KEY' in script
    assert "innerHTML" not in script and "document.write" not in script  # text only: nothing injected


def test_a_current_copy_is_not_sent_again() -> None:
    etag = console.PAGE.headers["ETag"]
    again = console.console({"if-none-match": etag})
    assert again.status == 304 and again.body == b"" and again.headers["ETag"] == etag
    assert console.console({"if-none-match": '"other"'}) is console.PAGE
    assert console.console({}).status == 200
