"""The demo's data folder: removed after a run that passed, kept and named after one that failed, so the
next failure can be read. The stack itself is replaced by a stand-in that writes into the folder it gets."""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from devhost import demo


def _stand_in(code: int, seen: list[Path]) -> Callable[[argparse.Namespace, Path], int]:
    def run(args: argparse.Namespace, data_dir: Path) -> int:
        (data_dir / "simulators-ledger.json").write_text("{}")
        seen.append(data_dir)
        return code

    return run


def test_a_failed_run_keeps_its_data_folder_and_names_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[Path] = []
    monkeypatch.setattr(demo, "run", _stand_in(1, seen))
    assert demo.main([]) == 1
    [data_dir] = seen
    assert (data_dir / "simulators-ledger.json").is_file(), "kept"
    printed = capsys.readouterr().out.replace("\n", "")
    shutil.rmtree(data_dir)
    assert str(data_dir) in printed


def test_a_run_that_passed_leaves_no_data_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Path] = []
    monkeypatch.setattr(demo, "run", _stand_in(0, seen))
    assert demo.main([]) == 0
    [data_dir] = seen
    assert not data_dir.exists()
