"""The peers' autoscalers as control planes (``inflight up --policy NAME``, ``inflight sim``).

Each peer is implemented from that system's own source and docs (cited in each module):

* :mod:`~inflight.planes.peers.kpa` — Knative's KPA, concurrency mode;
* :mod:`~inflight.planes.peers.ray_serve` — Ray Serve's default autoscaling policy;
* :mod:`~inflight.planes.peers.prom_trigger` — KEDA's Prometheus scaler, which drives the
  existing KEDA + HPA loop (:mod:`inflight.planes.autoscaler`) for ``vllm-waiting``
  (vLLM production-stack), ``epp-queue`` (llm-d) and ``hpa-rps``.

What each reads is a :class:`~inflight.planes.peers.signals.Signal`, read through an
injected ``read(Signal) -> float``: the live stack answers it with a Prometheus instant
query (:mod:`inflight.up.peer_loop`), the simulator from its own simulated scrapes. The
decision logic takes ``now_s`` and never reads a clock; :mod:`~inflight.planes.peers.catalog`
says how to build each one.
"""
