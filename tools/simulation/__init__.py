"""A deterministic simulation of the engine: the real Scheduler, Agents, Supervisor, operator actions,
shared breakers and callback route in one process, on simulated ports (Table Storage, Service Bus, remote
services that may answer later and call back, a virtual clock) whose every choice comes from a seed. Local
tooling, never deployed (``.funcignore``).

``python -m simulation --seed N`` runs one seed; see docs/simulation.md.
"""
