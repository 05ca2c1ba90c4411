"""The peers' autoscalers as pure deciders, each step named as its system names it: KPA's
multiscaler ``tick``, Ray Serve's ``controller_pass`` (``(spec, state, …, now_s) ->
(Decision, state)``), and KEDA's Prometheus trigger's ``metric_and_activity`` (stateless).

Each is implemented from that system's own source (cited in each module), split as Knative's
``pkg/autoscaler`` and Ray Serve's ``autoscaling_policy.py`` split theirs: the rule is a
function of frozen values and ``now_s``; the loop that reads the signals, keeps the state
between calls and applies the decision is :mod:`inflight.planes.peers` (the same loop for
``inflight up`` and ``inflight sim``).

* :mod:`~inflight.control.peers.base` — what every decider is given and returns
  (:class:`~inflight.control.peers.base.Signal`, :class:`~inflight.control.peers.base.Replicas`,
  :class:`~inflight.control.peers.base.Decision`);
* :mod:`~inflight.control.peers.kpa` — Knative's KPA, concurrency mode (the stable and
  panic windows, ``Scale``, min/max scale);
* :mod:`~inflight.control.peers.ray_serve` — Ray Serve's default policy (the handles'
  look-back average, the delay logic);
* :mod:`~inflight.control.peers.prom_trigger` — KEDA's Prometheus scaler (``ignoreNullValues``,
  milli-units, activation); the replica arithmetic around it is :mod:`inflight.control.hpa`
  and :mod:`inflight.control.keda`.
"""
