"""The order workflow: the business layer on top of the engine (order model, workflow, remote services)."""
