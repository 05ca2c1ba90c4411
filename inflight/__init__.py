"""inflight: scale vLLM on saturation (requests in flight ÷ capacity), not on QPS.

This package holds what every service shares: the ``inflight`` command line
(:mod:`inflight.cli`), the names in the contracts between the parts
(:mod:`inflight.names`), and process/port/Prometheus plumbing used by the
single-machine stack and by the tests (:mod:`inflight.procs`,
:mod:`inflight.prom`).
"""

__version__ = "0.1.0"
