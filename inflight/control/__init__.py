"""The pure deciders: every scaling and lifecycle rule, as functions of values and ``now``.

No I/O, no clock, no logging: the live stack (``inflight.up``), the Kubernetes path (the
scaler, whose HPA/KEDA arithmetic the manifests copy) and the simulator (``inflight.sim``)
call the same functions here. Allowed imports: the standard library and ``inflight.names``
(``tests/unit/test_layout.py`` keeps it so).

* :mod:`inflight.control.policy` — the saturation policy (L ÷ capacity, the scale-down
  window, growth headroom).
* :mod:`inflight.control.hpa_math`, :mod:`inflight.control.hpa` — the HPA's arithmetic.
* :mod:`inflight.control.keda` — KEDA's zero rules (activation, cooldown).
* :mod:`inflight.control.lifecycle` — a replica's life (start-up, health, drain, back-off).
* :mod:`inflight.control.periodic` — when a fixed-period loop runs next.
* :mod:`inflight.control.hold_order` — how the router orders the requests it holds.
* :mod:`inflight.control.trigger` — the trigger metadata ``inflight up`` and ``inflight sim``
  send the scaler.
* :mod:`inflight.control.restarts` — when to restart a core process that died.
* :mod:`inflight.control.peers` — the peers' autoscalers (Knative's KPA, Ray Serve's
  default policy, KEDA's Prometheus scaler), each a ``decide(spec, state, …, now_s)``.
"""
