"""A small Bicep tokenizer for the linter rules that can be checked without the Bicep CLI.

It separates code from comments and string text (keeping the code inside ``${...}`` interpolations),
then finds the symbols a file declares and the identifiers it references. That is enough for
no-unused-params and no-unused-vars: a parameter or variable never referenced in its own file.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DECLARATION = re.compile(r"\b(param|var|output|resource|module|type|func|import)\s+([A-Za-z_][A-Za-z0-9_]*)")


@dataclass
class Scanned:
    """One file split into code (strings' text blanked out) and the string literals' text."""

    code: str = ""
    literals: list[str] = field(default_factory=list)


def scan(text: str) -> Scanned:
    """Drop comments, move string text to ``literals`` and keep interpolated expressions as code."""
    out = Scanned()
    code: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("//", i):
            i = text.find("\n", i) if "\n" in text[i:] else len(text)
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
            code.append(" ")
        elif text.startswith("'''", i):  # multi-line string: no escapes, no interpolation
            end = text.find("'''", i + 3)
            end = len(text) if end < 0 else end
            out.literals.append(text[i + 3 : end])
            code.append("''")
            i = end + 3
        elif text[i] == "'":
            i = _string(text, i + 1, out, code)
        else:
            code.append(text[i])
            i += 1
    out.code = "".join(code)
    return out


def _string(text: str, i: int, out: Scanned, code: list[str]) -> int:
    """Scan a single-quoted string from just after its quote; return the index after its end."""
    literal: list[str] = []
    code.append("'")
    while i < len(text) and text[i] != "'":
        if text[i] == "\\" and i + 1 < len(text):
            literal.append(text[i + 1])
            i += 2
        elif text.startswith("${", i):
            depth, start = 1, i + 2
            i = start
            while i < len(text) and depth:
                if text[i] == "'":  # a string inside the expression
                    inner = Scanned()
                    inner_code: list[str] = []
                    i = _string(text, i + 1, inner, inner_code)
                    out.literals.extend(inner.literals)
                    code.append(" " + "".join(inner_code) + " ")
                    continue
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                if depth:
                    code.append(text[i])
                i += 1
            code.append(" ")
        else:
            literal.append(text[i])
            i += 1
    out.literals.append("".join(literal))
    code.append("'")
    return i + 1


def declarations(code: str) -> dict[str, set[str]]:
    """Names declared per keyword (``param``, ``var``, ...) at the start of a line."""
    found: dict[str, set[str]] = {}
    for line in code.splitlines():
        match = _DECLARATION.match(line.strip())
        if match and line[:1] not in (" ", "\t"):
            found.setdefault(match.group(1), set()).add(match.group(2))
    return found


def references(code: str) -> Counter[str]:
    """How often each identifier is referenced: not as a declaration's name, a member or an object key."""
    counts: Counter[str] = Counter()
    for match in _IDENTIFIER.finditer(code):
        start, end = match.span()
        before = code[:start].rstrip(" \t")
        after = code[end:].lstrip(" \t")
        if before.endswith(".") and not before.endswith("..."):
            continue  # a property access: x.name
        if after.startswith(":") and not after.startswith("::") and (before == "" or before[-1] in "\n{,"):
            continue  # an object key, not the middle of a ternary (a ? b : c)
        previous = before.rsplit(None, 1)[-1] if before.strip() else ""
        if _DECLARATION.fullmatch(f"{previous} {match.group()}"):
            continue  # the name in its own declaration
        counts[match.group()] += 1
    return counts


def unused(text: str) -> dict[str, list[str]]:
    """Parameters and variables of one file that nothing in the file references."""
    scanned = scan(text)
    declared = declarations(scanned.code)
    used = references(scanned.code)
    return {
        kind: sorted(name for name in declared.get(kind, set()) if not used[name])
        for kind in ("param", "var")
    }
