"""The business-agnostic engine of the Scheduler Agent Supervisor pattern.

Scheduler, Agent runtime, Supervisor, the state-store and messaging ports, workflow definition types
and telemetry. It never imports a business workflow: a workflow is handed to it as data.
"""
