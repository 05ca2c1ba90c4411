"""The single-machine stack behind ``inflight up``.

Where things are:

* :mod:`orchestrator.hpa` — the HPA's arithmetic (AverageValue, tolerance, stabilization,
  rate policies) as a pure function of time; ``SHIPPED_BEHAVIOR`` and the Kubernetes
  default periods live here (the manifests copy them).
* :mod:`orchestrator.keda` — KEDA's zero rules (activation, cooldown), pure.
* :mod:`orchestrator.autoscaler` — the loop that calls the scaler on KEDA's and the HPA's
  clocks and applies the two pure cores; :mod:`orchestrator.scaler_client` is its gRPC side.
* :mod:`orchestrator.supervisor` — replicas: process groups, ports reported by the replica
  (or read back from /proc, :mod:`inflight.ports`), health gating, draining, restart with
  back-off.
* :mod:`orchestrator.stack` — starts and stops everything; :mod:`orchestrator.state` the
  state directory; :mod:`orchestrator.orphans` stops what a killed run left behind.
* :mod:`orchestrator.peers` — the peers' autoscalers (Knative KPA, Ray Serve, KEDA
  Prometheus triggers for production-stack, llm-d and an HPA on request rate), pure cores
  with injected reads; :mod:`orchestrator.peer_loop` reads their signals from Prometheus.
* :mod:`orchestrator.cli` — ``inflight up``'s flags: the one wiring site.
* :mod:`orchestrator.fake_replica` — a tiny stand-in replica for tests.
"""
