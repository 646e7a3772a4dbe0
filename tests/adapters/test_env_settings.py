"""When the table client must look up proxy and netrc settings on every request."""

from __future__ import annotations

from pathlib import Path

from adapters.table_store import env_settings_in_use


def test_nothing_to_find_means_no_lookups(tmp_path: Path) -> None:
    assert env_settings_in_use({"HOME": str(tmp_path), "PATH": "/bin", "HTTPS_PROXY": ""}) is False


def test_a_proxy_in_the_environment_is_honoured(tmp_path: Path) -> None:
    for name in ("HTTPS_PROXY", "http_proxy", "ALL_PROXY", "NO_PROXY"):
        assert env_settings_in_use({"HOME": str(tmp_path), name: "http://proxy:3128"}) is True


def test_a_netrc_file_is_honoured(tmp_path: Path) -> None:
    (tmp_path / ".netrc").write_text("machine example.org login a password b\n")
    assert env_settings_in_use({"HOME": str(tmp_path)}) is True
    other = tmp_path / "elsewhere"
    other.write_text("machine example.org login a password b\n")
    assert env_settings_in_use({"HOME": "/nonexistent", "NETRC": str(other)}) is True
