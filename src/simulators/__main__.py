"""``python -m simulators``: the same as the ``remote-simulators`` command."""

import sys

from .cli import main

sys.exit(main())
