"""Checkov checks (Python) for plain Bicep resources: Entra ID is the only way in.

Checkov runs these on ``resource`` declarations. The deployment itself declares these resources through
Azure Verified Modules, which Checkov cannot look into; the YAML graph checks beside this file
(``avm_*.yaml``) hold the module calls to the same rules. These catch a plain resource that replaces a
module one day. Loaded with ``checkov --external-checks-dir infra/checks``; this file runs inside the
Checkov virtual environment only.
"""

from __future__ import annotations

from typing import Any

from checkov.bicep.checks.resource.base_resource_check import BaseResourceCheck
from checkov.common.models.enums import CheckCategories, CheckResult


def _property(conf: dict[str, Any], name: str) -> Any:
    """``properties.<name>`` of a resource body, matching the name case-insensitively (ARM does)."""
    properties = conf.get("properties")
    if not isinstance(properties, dict):
        return None
    return next((value for key, value in properties.items() if key.lower() == name.lower()), None)


class _RequiredProperty(BaseResourceCheck):
    """Passes when ``properties.<name>`` is literally ``expected`` (an expression or a gap fails)."""

    def __init__(self, check_id: str, name: str, resource_type: str, prop: str, expected: bool) -> None:
        super().__init__(
            name=name,
            id=check_id,
            categories=[CheckCategories.IAM],
            supported_resources=[resource_type],
        )
        self.prop = prop
        self.expected = expected

    def scan_resource_conf(self, conf: dict[str, Any]) -> CheckResult:
        return CheckResult.PASSED if _property(conf, self.prop) is self.expected else CheckResult.FAILED


class ServiceBusLocalAuthDisabled(_RequiredProperty):
    """Service Bus namespaces accept Entra ID only (no SAS keys)."""

    def __init__(self) -> None:
        super().__init__(
            "CKV_ORDERS_1",
            "Service Bus namespace disables local (SAS) authentication",
            "Microsoft.ServiceBus/namespaces",
            "disableLocalAuth",
            True,
        )


class StorageSharedKeyDisabled(_RequiredProperty):
    """Storage accounts accept Entra ID only (no account keys, no SAS signed with them)."""

    def __init__(self) -> None:
        super().__init__(
            "CKV_ORDERS_2",
            "Storage account disables shared-key access",
            "Microsoft.Storage/storageAccounts",
            "allowSharedKeyAccess",
            False,
        )


class AppInsightsLocalAuthDisabled(_RequiredProperty):
    """Application Insights accepts telemetry with an Entra ID token only."""

    def __init__(self) -> None:
        super().__init__(
            "CKV_ORDERS_3",
            "Application Insights disables local (instrumentation key) authentication",
            "Microsoft.Insights/components",
            "DisableLocalAuth",
            True,
        )


class KeyVaultRbacAuthorization(_RequiredProperty):
    """Key Vaults authorize data-plane access by Azure RBAC only (no access policies)."""

    def __init__(self) -> None:
        super().__init__(
            "CKV_ORDERS_4",
            "Key Vault uses Azure RBAC authorization (no access policies)",
            "Microsoft.KeyVault/vaults",
            "enableRbacAuthorization",
            True,
        )


check_service_bus = ServiceBusLocalAuthDisabled()
check_storage = StorageSharedKeyDisabled()
check_app_insights = AppInsightsLocalAuthDisabled()
check_key_vault = KeyVaultRbacAuthorization()
