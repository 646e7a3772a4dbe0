"""The remote services: one module per service with its declaration (client calls and simulator
behaviour), the declaration's types, and the HTTP client the agents call them with."""
