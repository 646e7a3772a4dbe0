"""``python -m smoke``: the same as the ``orders-smoke`` console script."""

from smoke.cli import main

raise SystemExit(main())
