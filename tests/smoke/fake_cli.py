"""A stand-in for a command-line tool (``az``, ``azd``) on a PATH directory: it records each call's arguments
and answers from a list of (substring of the arguments, output, exit code), the first match winning."""

from __future__ import annotations

import json
import sys
from pathlib import Path

SCRIPT = """#!{python}
import json, sys
from pathlib import Path
here = Path(__file__).resolve().parent
name = Path(__file__).name
arguments = " ".join(sys.argv[1:])
with (here / f"{{name}}-calls.txt").open("a") as calls:
    calls.write(arguments + "\\n")
for needle, output, code in json.loads((here / f"{{name}}-answers.json").read_text()):
    if needle in arguments:
        if output:
            print(output)
        sys.exit(code)
"""


def fake_cli(directory: Path, name: str, answers: list[tuple[str, str, int]]) -> Path:
    """Put ``name`` on ``directory``; returns the file its calls are recorded in, one line per call."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}-answers.json").write_text(json.dumps(answers))
    script = directory / name
    script.write_text(SCRIPT.format(python=sys.executable))
    script.chmod(0o755)
    return directory / f"{name}-calls.txt"


def calls(record: Path) -> list[str]:
    """The recorded calls (none if the tool was never run)."""
    return record.read_text().splitlines() if record.exists() else []
