"""``python -m servicebus_emulator``: the same as the ``servicebus-emulator`` command."""

import sys

from .cli import main

sys.exit(main())
