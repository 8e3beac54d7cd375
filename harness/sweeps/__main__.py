"""``python -m harness.sweeps``: see :mod:`harness.sweeps.driver`."""

from harness.sweeps.driver import main

raise SystemExit(main())
