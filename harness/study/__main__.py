"""``python -m harness.study experiments/<name>.yaml ...``: see :mod:`harness.study.driver`."""

from harness.study.driver import main

raise SystemExit(main())
