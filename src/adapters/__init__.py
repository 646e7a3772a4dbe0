"""Adapters from the engine's ports to Azure services: Table Storage, Service Bus, HTTP."""
