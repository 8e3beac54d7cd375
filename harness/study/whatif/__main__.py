"""``python -m harness.study.whatif experiments/whatif/<name>.yaml [...]``: see :mod:`harness.study.whatif.run`."""

from harness.study.whatif.run import main

raise SystemExit(main())
