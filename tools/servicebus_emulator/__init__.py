"""A local Azure Service Bus emulator that the real azure-servicebus SDK talks to over AMQP 1.0.

Part of the local runtime: used by the development stack and the tests, never deployed.
"""

from .broker import Broker
from .config import ConfigError, EmulatorConfig, load_config

__all__ = ["Broker", "ConfigError", "EmulatorConfig", "load_config"]
