"""``inflight sim``: the whole autoscaling loop in virtual seed time, on the stack's own code.

A discrete-event simulation of requests, the router, the replicas, Prometheus' scrapes and
range queries, the scaler, KEDA and the HPA, and the replicas' start-up and drain. Every
decision is made by the function the live stack calls (``inflight.emulator.engine``, ``router.pool``
and ``router.dispatch``, ``inflight.control.policy`` on a window built by
``external_scaler.sources.prometheus.window_from_matrix``, ``inflight.planes.autoscaler``,
``hpa`` and ``keda``); only the clock and the I/O are replaced. Nothing here sleeps or
reads a clock: time is the event queue's (``inflight.sim.events``).
"""
