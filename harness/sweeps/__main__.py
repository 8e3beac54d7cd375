"""Deprecated: ``python -m harness.sweeps`` is ``python -m harness.study`` (the one study pipeline)."""

from harness.study.driver import main

raise SystemExit(main())
