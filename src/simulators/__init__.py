"""Simulators of the remote services the order-processing agents call, one per declared service.

Part of the local runtime (and of demos): the services, their routes, request bodies, answers and
rejection reasons come from the services' declaration (``orders.catalog.SERVICES``). Each service applies
effects idempotently per ``Idempotency-Key``, can be made slow or faulty through ``POST /faults``, and
records in a ledger on disk what it really applied and compensated, so tests can check the system left
nothing half done.
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
