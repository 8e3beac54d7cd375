"""Deprecated: ``python -m harness.sweeps`` is ``python -m harness.study`` (the one study pipeline)."""

from harness.cli import warn_deprecated_alias
from harness.study.driver import main

warn_deprecated_alias("python -m harness.sweeps")
raise SystemExit(main())
