"""The peers' autoscalers as control planes (``inflight up --policy NAME``, ``inflight sim``).

Each peer's rule is a pure decider in :mod:`inflight.control.peers` (implemented from that
system's own source and docs, cited there); the loops here are the imperative shell
around it — they keep time, read the signals, keep the state the decider returns, and
apply its decision:

* :mod:`~inflight.planes.peers.kpa` — Knative's KPA, concurrency mode
  (:mod:`inflight.control.peers.kpa`);
* :mod:`~inflight.planes.peers.ray_serve` — Ray Serve's default autoscaling policy
  (:mod:`inflight.control.peers.ray_serve`);
* :mod:`~inflight.planes.peers.prom_trigger` — KEDA's Prometheus scaler
  (:mod:`inflight.control.peers.prom_trigger`), which drives the existing KEDA + HPA loop
  (:mod:`inflight.planes.autoscaler`) for ``vllm-waiting`` (vLLM production-stack),
  ``epp-queue`` (llm-d) and ``hpa-rps``.

What each reads is a :class:`~inflight.control.peers.base.Signal`, read through an
injected ``read(Signal) -> float`` (:mod:`~inflight.planes.peers.signals`): the live stack
answers it with a Prometheus instant query (:mod:`inflight.up.peer_loop`), the simulator
from its own simulated scrapes (:mod:`inflight.sim.peers`); both build the same loops
(:mod:`~inflight.planes.peers.catalog`) with their own
:class:`~inflight.planes.peers.base.PeerIO`. No loop reads a clock: ``now_s`` is passed in.
"""
