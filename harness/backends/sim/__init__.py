"""The discrete-event serving simulator (``backend=sim``): the scheduler (``scheduler``), the
engine loop (``engine``), the variants a cell's config picks (``variants``, ``specdec``,
``vision_cache``) and the start-up check (``startup``); step times from :mod:`harness.backends.cost`."""
