"""The example services' tests run against the real simulators process, with the simulators' fixtures."""

from tests.simulators.conftest import client, shared_client, simulators, simulators_factory

__all__ = ["client", "shared_client", "simulators", "simulators_factory"]
