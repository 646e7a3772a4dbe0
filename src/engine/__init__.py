"""The business-agnostic engine of the Scheduler Agent Supervisor pattern: the Scheduler, the Agent runtime,
the Supervisor, the state-store and messaging ports, workflow definition types and telemetry. It never
imports a business workflow: a workflow is handed to it as data.

This module is the engine's face: what the app (``orders``, ``function_app.py``), the adapters and the local
runtime may use, imported from here (``from engine import TaskService``). The submodules are the engine's
own: they import one another, never this face, and only the engine's tests and the workshop that plants
bugs in them (the simulation, the benchmarks) reach into them. ``tests/test_layers.py`` holds outside code
to ``__all__``. Some submodules are public as namespaces: of names (queues, span and event names,
metrics, the formats switch), the operator actions' table, the input's sealing, the call history's helpers.
"""

from . import calls, formats, metrics, operator_actions, queues, sealing, telemetry, tracing
from .agent import Action, Agent
from .backfill import Answer, Backfill, BackfillPage, Backfills, Progress
from .breaker import BreakerRecord, BreakerState, BreakerStore
from .calls import AgentCall, CallEntry
from .clock import Clock, SystemClock
from .conditions import Declared, Test, check_value, field_at, refuse_unknown, tests_in
from .deadletters import (
    DeadLetter,
    DeadLetterAction,
    DeadLetterCount,
    DeadLetterNotFound,
    DeadLetterPage,
    DeadLetters,
    DeadLetterUnreachable,
    order_id_of,
)
from .errors import (
    Accepted,
    BreakerConflict,
    ConcurrencyError,
    Conflict,
    EngineError,
    InvalidContinuation,
    InvalidState,
    InvalidUpdate,
    NotFound,
    NotServedYet,
    NotUnderstood,
    PermanentError,
    PreconditionFailed,
    TransientError,
    UnknownStep,
    UnknownWorkflow,
)
from .formats import BEFORE_SWITCH, Formats, Switch
from .inbound import Inbound, receive
from .messages import (
    AgentReply,
    AgentRequest,
    ReplyOutcome,
    SchedulerCommand,
    callback_context,
    parse_callback_context,
    request_message_id,
)
from .operator_actions import OperatorAction
from .parts import EngineParts
from .ports import CreateOutcome, ExpiredEntry, MessageSender, Page, PurgeReport, StateCounts
from .retention import Purged, Retention, RetentionPolicy, parse_retention
from .scheduler import Scheduler, instance_id
from .sealing import InputKey, Keyring
from .search import AT_A_STEP, SearchQuery, prefixes, query_prefix
from .settings import EngineSettings
from .state import AuditEntry, Phase, ProcessState, StepState, StepStatus, TaskRecord, TaskState
from .supervisor import Supervisor
from .tasks import Caller, TaskService
from .transitions import awaits, open_updates
from .waits import APPROVAL, PARKED, TIMER, WAIT_KINDS, WaitKind
from .workflow import (
    Approval,
    StepDefinition,
    Timer,
    Update,
    WorkflowCatalog,
    WorkflowDefinition,
    sensitive,
    wait_seconds,
)

__all__ = [
    "APPROVAL",
    "AT_A_STEP",
    "BEFORE_SWITCH",
    "PARKED",
    "TIMER",
    "WAIT_KINDS",
    "Accepted",
    "Action",
    "Agent",
    "AgentCall",
    "AgentReply",
    "AgentRequest",
    "Answer",
    "Approval",
    "AuditEntry",
    "Backfill",
    "BackfillPage",
    "Backfills",
    "BreakerConflict",
    "BreakerRecord",
    "BreakerState",
    "BreakerStore",
    "CallEntry",
    "Caller",
    "Clock",
    "ConcurrencyError",
    "Conflict",
    "CreateOutcome",
    "DeadLetter",
    "DeadLetterAction",
    "DeadLetterCount",
    "DeadLetterNotFound",
    "DeadLetterPage",
    "DeadLetterUnreachable",
    "DeadLetters",
    "Declared",
    "EngineError",
    "EngineParts",
    "EngineSettings",
    "ExpiredEntry",
    "Formats",
    "Inbound",
    "InputKey",
    "InvalidContinuation",
    "InvalidState",
    "InvalidUpdate",
    "Keyring",
    "MessageSender",
    "NotFound",
    "NotServedYet",
    "NotUnderstood",
    "OperatorAction",
    "Page",
    "PermanentError",
    "Phase",
    "PreconditionFailed",
    "ProcessState",
    "Progress",
    "PurgeReport",
    "Purged",
    "ReplyOutcome",
    "Retention",
    "RetentionPolicy",
    "Scheduler",
    "SchedulerCommand",
    "SearchQuery",
    "StateCounts",
    "StepDefinition",
    "StepState",
    "StepStatus",
    "Supervisor",
    "Switch",
    "SystemClock",
    "TaskRecord",
    "TaskService",
    "TaskState",
    "Test",
    "Timer",
    "TransientError",
    "UnknownStep",
    "UnknownWorkflow",
    "Update",
    "WaitKind",
    "WorkflowCatalog",
    "WorkflowDefinition",
    "awaits",
    "callback_context",
    "calls",
    "check_value",
    "field_at",
    "formats",
    "instance_id",
    "metrics",
    "open_updates",
    "operator_actions",
    "order_id_of",
    "parse_callback_context",
    "parse_retention",
    "prefixes",
    "query_prefix",
    "queues",
    "receive",
    "refuse_unknown",
    "request_message_id",
    "sealing",
    "sensitive",
    "telemetry",
    "tests_in",
    "tracing",
    "wait_seconds",
]
