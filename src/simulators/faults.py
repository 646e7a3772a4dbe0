"""Fault injection: the per-service fault profile, the random draw that picks a fault, and counters."""

from __future__ import annotations

import enum
import random
from collections.abc import Mapping

from .models import SERVICES, FaultSettings, ServiceName


class Fault(enum.Enum):
    """What happens to one call. The values are the names used by ``GET /stats``."""

    NONE = "none"
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    HANG = "hang"
    LOST_REPLY = "lostReply"


def pick_fault(settings: FaultSettings, draw: float, *, permanent_possible: bool) -> Fault:
    """Map one uniform draw in [0, 1) to at most one fault.

    The rates are laid end to end in the order transient, permanent, hang, lost reply, and the fault is
    the band the draw falls in. When a call cannot fail permanently (a compensation, or the replay of a
    key already applied) the permanent band is left out instead of being turned into "no fault", so the
    other faults keep their configured rates. If the rates add up to more than 1 the later bands are cut
    short: with ``transientRate`` 1 every call is transient whatever the others say.
    """
    bands: list[tuple[Fault, float]] = [(Fault.TRANSIENT, settings.transient_rate)]
    if permanent_possible:
        bands.append((Fault.PERMANENT, settings.permanent_rate))
    bands += [(Fault.HANG, settings.hang_rate), (Fault.LOST_REPLY, settings.lost_reply_rate)]
    upper = 0.0
    for fault, rate in bands:
        upper += rate
        if draw < upper:
            return fault
    return Fault.NONE


class FaultInjector:
    """The current fault profile of every service and the one random source the faults are drawn from."""

    def __init__(self, seed: int | None = None) -> None:
        self._random = random.Random(seed)
        self._profile: dict[ServiceName, FaultSettings] = {service: FaultSettings() for service in SERVICES}

    def settings(self, service: ServiceName) -> FaultSettings:
        """The settings of one service right now (immutable, so a call can keep them while it awaits)."""
        return self._profile[service]

    def update(self, changes: Mapping[ServiceName, FaultSettings]) -> None:
        """Replace the settings of the services named; the others keep theirs."""
        self._profile.update(changes)

    def profile(self) -> dict[str, dict[str, float | int]]:
        """Every service's settings in their JSON form."""
        return {service: settings.wire() for service, settings in self._profile.items()}

    def chance(self, rate: float) -> bool:
        """One more draw, for a decision a call makes beyond its fault (an asynchronous answer and what
        becomes of its callback). Drawn only when the rate is above 0, so a profile without them meets the
        same faults with the same seed as before they existed."""
        return rate > 0 and self._random.random() < rate

    def draw(self, settings: FaultSettings, *, permanent_possible: bool) -> Fault:
        """Draw exactly one random number and return the fault it picks.

        Always one number per call, fault or not, so that with a seed the same sequence of calls meets
        the same sequence of faults.
        """
        return pick_fault(settings, self._random.random(), permanent_possible=permanent_possible)


class Stats:
    """Per-service counters of calls and of the faults injected into them (in memory only)."""

    FIELDS = (
        "calls",
        *(fault.value for fault in Fault if fault is not Fault.NONE),
        # Applies answered 202 and the callbacks that followed: sent (each copy), lost, duplicated, late.
        "accepted",
        "callbacks",
        "callbackLost",
        "callbackDuplicated",
        "callbackLate",
    )

    def __init__(self) -> None:
        self._counts: dict[ServiceName, dict[str, int]] = {
            service: dict.fromkeys(self.FIELDS, 0) for service in SERVICES
        }

    def call(self, service: ServiceName) -> None:
        """Count one call that reached fault injection."""
        self._counts[service]["calls"] += 1

    def fault(self, service: ServiceName, fault: Fault) -> None:
        """Count one injected fault (``Fault.NONE`` is not counted)."""
        if fault is not Fault.NONE:
            self._counts[service][fault.value] += 1

    def count(self, service: ServiceName, name: str) -> None:
        """Count one event of the asynchronous mode (one of :data:`FIELDS`)."""
        self._counts[service][name] += 1

    def snapshot(self) -> dict[str, dict[str, int]]:
        """A copy of every counter, for ``GET /stats``."""
        return {service: dict(counts) for service, counts in self._counts.items()}
