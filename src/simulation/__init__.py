"""A deterministic simulation of the engine: the real Scheduler, Agents, Supervisor, operator actions and
shared breakers in one process, on simulated ports (Table Storage, Service Bus, remote services, a
virtual clock) whose every choice comes from a seed. Local tooling, never deployed (``.funcignore``).

``python -m simulation --seed N`` runs one seed; see docs/simulation.md.
"""
