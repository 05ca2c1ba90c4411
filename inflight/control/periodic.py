"""When a fixed-period loop runs next: on its own phase, whenever the tick that ran it came.

The local loops (the KEDA poll and HPA sync in :mod:`inflight.planes.autoscaler`, the peers'
loops, the replicas' health checks) are ticked by a main loop every ~50 ms of wall time,
so a due run happens up to one tick late. Scheduling the next run from the tick
(``now + period``) adds that lateness to every period: at time-scale 0.1 a 15 s HPA sync
drifts by about +0.3 seed s per sync. The systems they stand in for wait on timers that
fire on time:

* the HPA: kubernetes ``pkg/controller/podautoscaler/horizontal.go``
  ``processNextWorkItem`` re-adds each HPA's key with ``queue.AddRateLimited(key)``, whose
  ``FixedItemIntervalRateLimiter`` delay is the resync period (15 s), and "if there's
  already request for the HPA in the queue then a new request is always dropped": a timer
  per HPA, one pending sync at most. That timer starts when a reconcile ends, so a real
  HPA slides by its reconcile's run time (milliseconds of API calls), not by a polling
  tick. (The worker is started with ``wait.Until(a.worker, time.Second, ...)``;
  ``wait.Until`` is ``JitterUntil(..., sliding=true)``, "the timer for period starts after
  the f completes" (apimachinery ``pkg/util/wait/backoff.go``), but that worker blocks on
  the queue for good and does not set the sync period.);
* KEDA: ``pkg/scaling/scale_handler.go`` ``startScaleLoop`` starts
  ``time.NewTimer(pollingInterval)`` *before* ``checkScalers``, so the period includes
  the check's run time (fixed phase);
* Knative's KPA (``pkg/autoscaler/scaling/multiscaler.go`` ``runScalerTicker``) and the
  kubelet's probes (``pkg/kubelet/prober/worker.go``) tick on a Go ``time.Ticker``, which
  keeps its phase and drops ticks for a slow receiver.

So the next run is due a whole number of periods after the last *due* time, not after
the tick that ran it. A stall longer than a period (the main loop blocked) runs once and
skips the missed runs, as a ticker drops ticks and a workqueue holds one request per key:
no burst of catch-up runs, and the phase is the one a controller that was not stalled
keeps.
"""

from __future__ import annotations

import math


def next_due(due_s: float, period_s: float, now_s: float) -> float:
    """The first time after ``now_s`` on the grid ``due_s + k·period_s`` (k ≥ 1).

    Call it when a run due at ``due_s`` happens at ``now_s`` (``now_s >= due_s``).

    >>> next_due(15.0, 15.0, 15.3)  # one tick late: the phase is kept
    30.0
    >>> next_due(15.0, 15.0, 55.0)  # 40 s stalled: runs once, the next is on the phase
    60.0
    """
    if not period_s > 0:
        raise ValueError(f"a loop's period must be > 0 s, got {period_s}")
    periods = max(1, math.floor((now_s - due_s) / period_s) + 1)
    nxt = due_s + periods * period_s
    while nxt <= now_s:  # the division rounded down
        nxt += period_s
    return nxt
