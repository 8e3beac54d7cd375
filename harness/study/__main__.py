"""``python -m harness.study experiments/<name>.yaml ...``: see :mod:`harness.study.cli`."""

from harness.study.cli import main

raise SystemExit(main())
