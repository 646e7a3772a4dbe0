"""The devhost's wait settings follow the declaration: every wait that names a setting gets a short one."""

from __future__ import annotations

from devhost.stack import DEFAULT_SETTINGS, local_wait_settings
from engine.workflow import Timer, wait_seconds
from orders.catalog import CATALOG


def test_every_declared_wait_setting_is_short_locally_and_never_longer_than_declared() -> None:
    waits = CATALOG.setting_waits()
    assert waits, "the catalog declares no wait with a setting: this test proves nothing"
    short = local_wait_settings(timer_seconds=2, approval_seconds=20)
    assert set(short) == set(waits)
    for name, wait in waits.items():
        cap = 2 if isinstance(wait, Timer) else 20
        assert float(short[name]) == min(cap, wait_seconds(wait)), name
        assert DEFAULT_SETTINGS[name] == short[name], name
