"""Simulators of the remote services the order-processing agents call: inventory, payment, shipping.

Part of the local runtime (and of demos): each service applies effects idempotently per
``Idempotency-Key``, can be made slow or faulty through ``POST /faults``, and records in a ledger on
disk what it really applied and compensated, so tests can check the system left nothing half done.
"""

from .app import SERVICE_SPECS, ServiceSpec, Simulators, create_app
from .faults import Fault, FaultInjector, Stats, pick_fault
from .ledger import JOURNAL_FILE_NAME, LEDGER_FILE_NAME, Ledger, LedgerError
from .models import SERVICES, FaultSettings, ServiceName

__all__ = [
    "JOURNAL_FILE_NAME",
    "LEDGER_FILE_NAME",
    "SERVICES",
    "SERVICE_SPECS",
    "Fault",
    "FaultInjector",
    "FaultSettings",
    "Ledger",
    "LedgerError",
    "ServiceName",
    "ServiceSpec",
    "Simulators",
    "Stats",
    "create_app",
    "pick_fault",
]
