"""Errors the worker reports before it starts serving."""

from __future__ import annotations


class ConfigurationError(Exception):
    """The app, host.json or the app settings (environment) do not allow the worker to start.

    The message says what is wrong and what to set; the worker prints it and exits with code 2.
    """
