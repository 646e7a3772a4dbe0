"""Published Azure limits and list prices, in one place, and the ceilings and costs derived from counts.

``orders_throughput.py`` counts the operations one order really causes on the local stack and hands them
to :func:`report`, which prints the figures ``docs/performance.md`` quotes under Capacity.

Sources (read 2026-11-23; prices are US dollars, pay-as-you-go list prices for East US, and differ by
region, currency and agreement: check the Azure pricing calculator):

- Service Bus throttling: learn.microsoft.com/azure/service-bus-messaging/service-bus-throttling
  (Standard: credit-based, 1,000 credits per second per namespace; a data operation costs 1 credit per
  message, a management operation 10).
- Table Storage scalability targets: learn.microsoft.com/azure/storage/tables/scalability-targets
  (2,000 entities per second per partition, 20,000 transactions per second per account).
- Prices: azure.microsoft.com/pricing/details/service-bus/, .../storage/tables/, .../functions/
  (Flex Consumption on demand), .../monitor/ (Log Analytics Analytics logs ingestion).
"""

from __future__ import annotations

from pydantic import BaseModel

# ---- published limits ---------------------------------------------------------------------------------
SB_STANDARD_CREDITS_PER_SECOND = 1_000
SB_DATA_OPERATION_CREDITS = 1  # send, receive, peek (per message); settlements counted alike here
SB_MANAGEMENT_OPERATION_CREDITS = 10  # create/read/update/delete of entities: the app makes none per order
TABLE_PARTITION_ENTITIES_PER_SECOND = 2_000
TABLE_ACCOUNT_TRANSACTIONS_PER_SECOND = 20_000

# ---- list prices (USD) ----------------------------------------------------------------------------------
SB_STANDARD_BASE_PER_HOUR = 0.0135  # about $10 a month
SB_STANDARD_INCLUDED_OPERATIONS_PER_MONTH = 13_000_000
SB_STANDARD_PER_MILLION_OPERATIONS = 0.80  # 13M-100M a month; $0.50 to 2,500M, $0.20 beyond
SB_PREMIUM_PER_MESSAGING_UNIT_HOUR = 0.928  # operations included, no per-operation charge
TABLE_PER_10K_TRANSACTIONS = 0.00036  # Standard LRS
FLEX_PER_GB_SECOND = 0.000026  # on-demand execution time
FLEX_PER_MILLION_EXECUTIONS = 0.40
FLEX_FREE_GB_SECONDS_PER_MONTH = 100_000
FLEX_FREE_EXECUTIONS_PER_MONTH = 250_000
LOG_ANALYTICS_PER_GB = 2.30  # Analytics logs, pay-as-you-go; 5 GB a month free per billing account
HOURS_PER_MONTH = 730

# ---- assumptions stated with the figures ----------------------------------------------------------------
APP_INSIGHTS_BYTES_PER_RECORD = 1_000  # an ingested request, dependency or trace row, with its columns


class OrderCounts(BaseModel):
    """What one order costs, as counted by the benchmark."""

    servicebus_operations: float  # every client operation the emulator saw (engine and host)
    status_messages: float  # sends to order-status; reading them is the application's cost
    table_transactions: float  # state, watch and history tables, including the clean-up once done
    state_entities: float  # entities read or written in the state table
    watch_entities: float  # entities read or written in the watch table
    history_entities: float = 0.0  # entities read or written in the history table
    executions: float  # function executions, Supervisor excluded
    execution_seconds: float  # their wall time, summed
    telemetry_records: float  # requests + dependencies + engine log records reaching Application Insights


class Setup(BaseModel):
    """The deployment the figures are for (infra/main.bicep defaults)."""

    shards: int = 8
    instance_memory_mb: int = 512
    sweep_period_seconds: float = 30.0
    sweep_table_requests: float = 8.0  # one query page per shard when nothing is due
    throughput: float = 10.0  # orders/s at which the Supervisor's cost is spread
    timers: int = 2  # the Supervisor and the retention clean-up, on the same schedule


def ceilings(order: OrderCounts, setup: Setup, with_status_reader: bool) -> dict[str, float]:
    """Orders per second at which each published limit is reached."""
    sb_ops = order.servicebus_operations + (2 * order.status_messages if with_status_reader else 0)
    return {
        "Service Bus Standard namespace (1,000 credits/s)": SB_STANDARD_CREDITS_PER_SECOND
        / (sb_ops * SB_DATA_OPERATION_CREDITS),
        f"state table, {setup.shards} partitions x 2,000 entities/s": TABLE_PARTITION_ENTITIES_PER_SECOND
        * setup.shards
        / order.state_entities,
        f"watch table, {setup.shards} partitions x 2,000 entities/s": TABLE_PARTITION_ENTITIES_PER_SECOND
        * setup.shards
        / order.watch_entities,
        f"history table, {setup.shards} partitions x 2,000 entities/s": TABLE_PARTITION_ENTITIES_PER_SECOND
        * setup.shards
        / max(order.history_entities, 1e-9),
        "storage account (20,000 transactions/s)": TABLE_ACCOUNT_TRANSACTIONS_PER_SECOND
        / order.table_transactions,
    }


def cost_per_million(order: OrderCounts, setup: Setup) -> dict[str, float]:
    """US dollars per million orders at the marginal list price (free grants and base charges aside)."""
    memory_gb = setup.instance_memory_mb / 1024
    supervisor_executions = 1 / (setup.sweep_period_seconds * setup.throughput)
    executions = order.executions + setup.timers * supervisor_executions
    return {
        "Service Bus Standard operations": order.servicebus_operations * SB_STANDARD_PER_MILLION_OPERATIONS,
        "Table transactions": (order.table_transactions + setup.sweep_table_requests * supervisor_executions)
        * 1_000_000
        / 10_000
        * TABLE_PER_10K_TRANSACTIONS,
        "Flex executions": executions * FLEX_PER_MILLION_EXECUTIONS,
        "Flex GB-s (durations measured here, no overlap)": order.execution_seconds
        * memory_gb
        * 1_000_000
        * FLEX_PER_GB_SECOND,
        "Flex GB-s (1 s minimum per execution)": executions
        * max(1.0, order.execution_seconds / max(order.executions, 1))
        * memory_gb
        * 1_000_000
        * FLEX_PER_GB_SECOND,
        "Application Insights ingestion": order.telemetry_records
        * APP_INSIGHTS_BYTES_PER_RECORD
        * 1_000_000
        / 1e9
        * LOG_ANALYTICS_PER_GB,
    }


def report(order: OrderCounts, setup: Setup) -> str:
    """The capacity and cost figures as printable text."""
    lines = [
        f"Ceilings (orders/s), {setup.shards} shards; Service Bus counts every operation as 1 credit:",
    ]
    bare = ceilings(order, setup, with_status_reader=False)
    read = ceilings(order, setup, with_status_reader=True)
    for name, value in bare.items():
        extra = (
            f" ({read[name]:,.0f} if the application also reads order-status)" if read[name] != value else ""
        )
        lines.append(f"  {name:<52} {value:>9,.0f}{extra}")
    lines.append(
        f"Supervisor (and the retention clean-up's timer, as many executions again): "
        f"{1 / setup.sweep_period_seconds:.3f} executions/s and "
        f"{setup.sweep_table_requests / setup.sweep_period_seconds:.2f} table requests/s whatever the load; "
        f"per order at {setup.throughput:g} orders/s: "
        f"{1 / (setup.sweep_period_seconds * setup.throughput):.4f} executions, "
        f"{setup.sweep_table_requests / (setup.sweep_period_seconds * setup.throughput):.3f} table requests"
    )
    lines.append(
        f"Cost per million orders (USD, list prices, {setup.instance_memory_mb} MB instances, "
        f"~{APP_INSIGHTS_BYTES_PER_RECORD} bytes per telemetry row):"
    )
    costs = cost_per_million(order, setup)
    for name, value in costs.items():
        lines.append(f"  {name:<52} {value:>9,.2f}")
    low = sum(v for k, v in costs.items() if "1 s minimum" not in k)
    high = sum(v for k, v in costs.items() if "measured" not in k)
    lines.append(f"  {'total':<52} {low:>9,.2f} .. {high:,.2f}")
    base = SB_STANDARD_BASE_PER_HOUR * HOURS_PER_MONTH
    premium = SB_PREMIUM_PER_MESSAGING_UNIT_HOUR * HOURS_PER_MONTH
    lines.append(
        f"Fixed: Service Bus Standard base ${base:,.2f}/month (13M operations included); "
        f"Premium ${premium:,.0f}/month per messaging unit"
    )
    return "\n".join(lines)
