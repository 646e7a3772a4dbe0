"""A service's name is written only where it is declared: every other product file derives it.

Adding a step and its service touches their declaration (``src/orders/services/<service>.py``,
``src/orders/catalog.py``) and nothing else of the product; the generated files are rewritten by
``python -m orders.generate``. Tests and docs may name the example services.

Only code is read: comments and docstrings are prose, and a service may well be named with a word prose
uses ("notifications", "payment"). What must not be there is a name the code acts on: a string literal,
an identifier, a route, a setting.
"""

from __future__ import annotations

import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from orders import released
from orders.catalog import SERVICES
from orders.generate import GENERATED

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = (".py", ".bicep", ".json", ".yaml", ".yml", ".html", ".js", ".css", ".sh", ".ps1", ".toml")
NOT_PRODUCT = ("tests/", "docs/", "bench/", "infra/contracts/")


# Outside a git checkout (a copy of the repository's files): what git would ignore is left out by name.
IGNORED_DIRECTORIES = {"node_modules", "__pycache__", "local.settings.json"}

# The comments of each kind of product file other than Python: a line comment starts at the line's start
# or after white space (so that a URL's "//" in a string is kept), a block comment anywhere.
LINE_COMMENT = {
    ".bicep": "//",
    ".js": "//",
    ".yaml": "#",
    ".yml": "#",
    ".sh": "#",
    ".ps1": "#",
    ".toml": "#",
}
BLOCK_COMMENT = {
    ".bicep": (r"/\*", r"\*/"),
    ".js": (r"/\*", r"\*/"),
    ".css": (r"/\*", r"\*/"),
    ".html": (r"<!--", r"-->"),
    ".ps1": (r"<#", r"#>"),
}


def listed_files() -> list[str]:
    """The repository's files: git's tracked and new files, or every file of a copy that is not a checkout."""
    if not (ROOT / ".git").exists():
        return [
            path.relative_to(ROOT).as_posix()
            for path in ROOT.rglob("*")
            if path.is_file()
            and not any(
                part.startswith(".") or part in IGNORED_DIRECTORIES for part in path.relative_to(ROOT).parts
            )
        ]
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return list(filter(None, listed.split("\0")))


def product_files() -> list[str]:
    """The product's files, generated ones excepted (and the record of released workflow versions, which
    ``python -m orders.released --record`` writes from the declaration)."""
    generated = {str(Path(p)) for p in GENERATED} | {released.RELEASED.relative_to(ROOT).as_posix()}
    return [
        name
        for name in listed_files()
        if name.endswith(PRODUCT)
        and not name.startswith(NOT_PRODUCT)
        and name not in generated
        and (ROOT / name).is_file()
    ]


def _python_code(text: str) -> dict[int, str]:
    """Python's code by line: every token but comments and docstrings (a string that is a statement of its
    own), each on the line it starts on."""
    lines: dict[int, list[str]] = {}
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type != tokenize.NL]
    statement_starts = (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
    for i, token in enumerate(tokens):
        if token.type == tokenize.COMMENT:
            continue
        if token.type == tokenize.STRING:
            before = next((t.type for t in reversed(tokens[:i]) if t.type != tokenize.COMMENT), None)
            after = next((t.type for t in tokens[i + 1 :] if t.type != tokenize.COMMENT), None)
            if (before is None or before in statement_starts) and after in (tokenize.NEWLINE, None):
                continue  # a docstring
        lines.setdefault(token.start[0], []).append(token.string)
    return {number: " ".join(parts) for number, parts in lines.items()}


def _other_code(text: str, suffix: str) -> dict[int, str]:
    """Another product file's code by line: its comments blanked (line count kept)."""
    if suffix in BLOCK_COMMENT:
        start, end = BLOCK_COMMENT[suffix]
        text = re.sub(rf"{start}.*?{end}", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.DOTALL)
    marker = LINE_COMMENT.get(suffix)
    lines = text.splitlines()
    if marker is not None:
        lines = [re.sub(rf"(^|\s){re.escape(marker)}.*$", "", line) for line in lines]
    return dict(enumerate(lines, 1))


def code_lines(name: str, text: str) -> dict[int, str]:
    """The code of the product file ``name`` by line number, without its comments and docstrings."""
    suffix = Path(name).suffix
    if suffix == ".py":
        try:
            return _python_code(text)
        except (tokenize.TokenError, SyntaxError, IndentationError):
            return dict(enumerate(text.splitlines(), 1))  # read it all rather than miss a name
    return _other_code(text, suffix)


def named(service: str, name: str, text: str) -> Iterator[str]:
    """Each line of code of ``name`` that names ``service`` as a word of its own."""
    word = re.compile(rf"(?<![\w-]){re.escape(service)}(?![\w-])", re.IGNORECASE)
    for number, line in sorted(code_lines(name, text).items()):
        if word.search(line):
            yield f"{name}:{number}: {line.strip()}"


def test_a_service_is_named_only_in_its_declaration() -> None:
    found: list[str] = []
    for service in SERVICES:
        allowed = {f"src/orders/services/{service.name}.py", "src/orders/catalog.py"}
        for name in product_files():
            if name not in allowed:
                found += named(service.name, name, (ROOT / name).read_text(errors="replace"))
    assert not found, "derive these from orders.catalog instead:\n" + "\n".join(found)


PYTHON = '''"""The payment module docstring names payment."""

# a comment on payment
URL = "https://example.com//payment"  # the payment service


def charge() -> str:
    """Charge the payment."""
    return "payment"


class Refund:
    """Refund a payment."""

    service = payment_service = "payments"
'''


@pytest.mark.parametrize(
    ("name", "text", "lines"),
    [
        ("a.py", PYTHON, [4, 9]),
        ("a.bicep", "// payment\nparam x string = 'payment' // payment\n/* payment\npayment */\n", [2]),
        ("a.yaml", "# payment\nservice: payment # payment\nurl: http://x/#payment\n", [2, 3]),
        ("a.html", "<!-- payment\n-->\n<td>payment</td>\n", [3]),
        ("a.js", "/* payment */ const s = 'payment'; // payment\n", [1]),
        ("a.json", '{"payment": 1}\n', [1]),
    ],
)
def test_the_check_reads_code_not_comments_or_docstrings(name: str, text: str, lines: list[int]) -> None:
    found = [int(line.split(":")[1]) for line in named("payment", name, text)]
    assert found == lines
