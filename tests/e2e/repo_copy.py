"""A copy of the repository to change as a team would (declare a service, ship a workflow version) and
run the local stack on, with this checkout's installed packages and Azurite."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from devhost import launch
from devhost.releases import package_path, protos_folder

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class RepoCopy:
    """A copy of the repository's files (tracked and new, not ignored, and the generated protobuf classes)
    under ``root``, itself a git work tree."""

    root: Path

    @classmethod
    def make(cls, dest: Path) -> RepoCopy:
        """Copy the repository to ``dest``; node_modules (Azurite) is linked, not copied."""
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        ).stdout.decode()
        for name in filter(None, listed.split("\0")):
            source = ROOT / name
            if source.is_file():
                target = dest / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
        (dest / "node_modules").symlink_to(ROOT / "node_modules", target_is_directory=True)
        # What `make install` generates (ignored by git) belongs to the installed checkout: copied too.
        for generated in (ROOT / protos_folder(ROOT)).glob("*_pb2.py"):
            shutil.copy2(generated, dest / generated.relative_to(ROOT))
        # A git work tree of its own with its files staged, as a team's checkout is: the tests that copy
        # the repository (git ls-files) can run in the copy too.
        subprocess.run(["git", "init", "--quiet"], cwd=dest, check=True, capture_output=True)
        excludes = dest / ".git" / "info" / "exclude"
        excludes.parent.mkdir(exist_ok=True)
        with excludes.open("a") as exclude:
            exclude.write("/node_modules\n")  # the link (.gitignore's node_modules/ matches folders only)
        subprocess.run(["git", "add", "--all"], cwd=dest, check=True, capture_output=True)
        return cls(dest)

    def env(self) -> dict[str, str]:
        """An environment in which Python imports the copy's packages before the installed checkout's."""
        return {"PYTHONPATH": package_path(self.root)}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``python <args>`` in the copy, with its packages; raises with the output if it fails."""
        done = subprocess.run(
            [sys.executable, *args],
            cwd=self.root,
            env={**os.environ, **self.env()},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (
            f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
        return done

    def write(self, path: str, text: str) -> None:
        """Write a file of the copy."""
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")

    def read(self, path: str) -> str:
        """Read a file of the copy."""
        return (self.root / path).read_text(encoding="utf-8")

    def apply(self, diff: str) -> None:
        """Apply a unified diff to the copy, as ``git apply`` would; raises if it does not apply. A diff
        the copy holds already (it would apply in reverse: a tree that has made these edits) is left be."""
        patch = self.root / ".walkthrough.diff"
        patch.write_text(diff, encoding="utf-8")
        try:
            applied = ["git", "apply", "--check", "--reverse", str(patch)]
            if subprocess.run(applied, cwd=self.root, capture_output=True).returncode == 0:
                return
            subprocess.run(
                ["git", "apply", str(patch)],
                cwd=self.root,
                check=True,
                capture_output=True,
                text=True,
            )
        except subprocess.CalledProcessError as exc:
            raise DiffDoesNotApply(f"the diff does not apply:\n{exc.stderr}\n{diff}") from exc
        finally:
            patch.unlink()

    def restore(self, paths: Iterable[str], commit: str) -> None:
        """Make each of ``paths`` of the copy what it was in this repository's ``commit``; one that ``commit``
        does not hold is removed."""
        for name in paths:
            target = self.root / name
            try:
                text = git_show(commit, name)
            except subprocess.CalledProcessError:  # not there then
                target.unlink(missing_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(text)

    def start(self, data_dir: Path, env: dict[str, str], workers: int = 1) -> launch.RunningDevhost:
        """The local stack on the copy's code (its function_app.py, its declaration, its queue config)."""
        return launch.start(data_dir, workers=workers, env={**env, **self.env()})


class DiffDoesNotApply(AssertionError):
    """A diff of the docs that the copy's files do not take."""


def git_show(commit: str, path: str) -> bytes:
    """A file of this repository as it was in ``commit``."""
    return subprocess.run(
        ["git", "show", f"{commit}:{path}"], cwd=ROOT, check=True, capture_output=True
    ).stdout


def blocks(markdown: str, marker: str) -> list[str]:
    """The fenced code blocks of ``markdown`` announced by an HTML comment ``<!-- marker -->`` on the line
    before them, in order."""
    pattern = rf"<!-- {re.escape(marker)} -->\n```[a-z]*\n(.*?)```"
    return re.findall(pattern, markdown, re.DOTALL)


def files(markdown: str) -> list[tuple[str, str]]:
    """(path, text) of every fenced code block announced by ``<!-- file: <path> -->`` on the line before."""
    return re.findall(r"<!-- file: (\S+) -->\n```[a-z]*\n(.*?)```", markdown, re.DOTALL)
