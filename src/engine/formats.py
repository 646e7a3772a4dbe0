"""The formats of what the engine stores and sends, and which of them this release reads.

A release reads the formats of the release before it and passes over, without failing, what a later
release writes (docs/upgrading.md). A format number changes only when what is stored or sent changes in a
way a reader of the previous number would misread; adding a field that readers may ignore is not one.

- **Messages** (:mod:`engine.messages`) carry their format in a ``format`` field. Format 1 is release
  1.0.0's, whose readers refuse any field they do not know, so format 1 is written as the field's absence;
  a later format names itself, and is written only once every instance reads it (the switch).
- **The task's records** in the state store (state, steps, input, the history's and parking's one-entity
  copies) carry a ``Format`` property; absent, they are 1.0.0's, format 1.

What this release cannot read (a later format, an unknown kind or outcome, a corrupted record) raises
:class:`NotUnderstood`: a message is passed over (sent again later, for an instance that reads it) and a
record is passed over by sweeps and answered as such by reads, each reported with the order named
(the ``NotUnderstood`` event). Nothing of it is dead-lettered, aborts a sweep or fails a read.
"""

from __future__ import annotations

from .errors import NotUnderstood

# The newest message format this release reads, and the one it writes.
MESSAGES_READ = 1
MESSAGES_WRITTEN = 1
# The newest format of the task's stored records this release reads, and the one it writes.
RECORDS_READ = 1
RECORDS_WRITTEN = 1
# The stored property naming a record's format.
FORMAT_PROPERTY = "Format"

__all__ = [
    "FORMAT_PROPERTY",
    "MESSAGES_READ",
    "MESSAGES_WRITTEN",
    "RECORDS_READ",
    "RECORDS_WRITTEN",
    "NotUnderstood",
    "record_format",
]


def record_format(value: object) -> int:
    """The format of a stored record from its ``Format`` property (absent: 1.0.0's, 1); raises
    :class:`NotUnderstood` for a later one or a value that is not a format."""
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise NotUnderstood(f"its {FORMAT_PROPERTY} is not a format: {value!r}")
    if value > RECORDS_READ:
        raise NotUnderstood(f"it is stored in format {value}; this release reads up to {RECORDS_READ}")
    return value
