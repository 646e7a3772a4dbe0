"""Simulators of the remote services the order-processing agents call, one per declared service.

Part of the local runtime (and of demos): the services, their routes, request bodies, answers and
rejection reasons come from the services' declaration (``orders.catalog.SERVICES``). Each service applies
effects idempotently per ``Idempotency-Key``, answers with the result values its resource declares, has
an undo route only for a resource that can be undone, can be made slow or faulty through
``POST /faults``, and records in a ledger on disk what it really applied and compensated, with the
values it returned and those each call carried, so tests (and ``ledger_check``) can check that the
system left nothing half done and passed on what it was given.
"""

from .app import RESOURCE_SPECS, ResourceSpec, Simulators, create_app
from .faults import Fault, FaultInjector, Stats, pick_fault
from .ledger import JOURNAL_FILE_NAME, LEDGER_FILE_NAME, Ledger, LedgerError
from .models import SERVICES, FaultSettings, ServiceName

__all__ = [
    "JOURNAL_FILE_NAME",
    "LEDGER_FILE_NAME",
    "RESOURCE_SPECS",
    "SERVICES",
    "Fault",
    "FaultInjector",
    "FaultSettings",
    "Ledger",
    "LedgerError",
    "ResourceSpec",
    "ServiceName",
    "Simulators",
    "Stats",
    "create_app",
    "pick_fault",
]
