"""The deployment's two tools (docs/upgrading.md) on Azurite: the formats switch and the backfills."""

from __future__ import annotations

import uuid

import pytest

from orders import backfills, formats_switch


@pytest.fixture
def store_env(azurite_connection_string: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STATE_STORE_CONNECTION", "STATE_STORE_ENDPOINT", "STATE_TABLE_NAME", "STATE_SHARDS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STATE_STORE_CONNECTION", azurite_connection_string)
    monkeypatch.setenv("STATE_TABLE_NAME", "t" + uuid.uuid4().hex[:16])
    monkeypatch.setenv("STATE_SHARDS", "2")


def test_without_a_state_store_each_tool_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("STATE_STORE_CONNECTION", "STATE_STORE_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    for tool in (backfills.main, formats_switch.main):
        assert tool([]) == 2
        assert "set STATE_STORE_CONNECTION or STATE_STORE_ENDPOINT" in capsys.readouterr().err


@pytest.mark.usefixtures("store_env")
def test_the_switch_is_held_and_flipped_by_hand(capsys: pytest.CaptureFixture[str]) -> None:
    assert formats_switch.main([]) == 0  # a new store: its own formats at once
    assert "writes its own formats (format 2)" in capsys.readouterr().out
    assert formats_switch.main(["--hold"]) == 0
    assert "writes the previous release's formats (format 1); held" in capsys.readouterr().out
    assert formats_switch.main([]) == 0  # held stays held
    assert "held" in capsys.readouterr().out
    assert formats_switch.main(["--switch"]) == 0
    assert "writes its own formats (format 2)" in capsys.readouterr().out


@pytest.mark.usefixtures("store_env")
def test_the_backfills_say_where_they_are_and_run_to_the_end_on_demand(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert backfills.main([]) == 0
    assert capsys.readouterr().out == "listing-entries: not started (the backfill function starts it)\n"
    assert backfills.main(["--run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("listing-entries: finished ") and "(read 0, changed 0, skipped 0)" in out
