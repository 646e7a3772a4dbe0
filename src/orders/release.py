"""The product's release: one semantic version for the app, the engine and what they store and send.

A release promises to read everything the release before it stored and sent, and to pass over, not fail
on, what the release after it will (docs/upgrading.md). CHANGELOG.md has a section per release naming
every change to what is stored or sent; ``GET /api/health`` answers the version running."""

from __future__ import annotations

VERSION = "1.1.0"
# The first release whose data and messages every later release accepts.
FIRST_KEPT = "1.0.0"
