"""``python -m quantcompare_client check ...``: the same as the ``quantcompare-client`` command."""

from .cli import main

raise SystemExit(main())
