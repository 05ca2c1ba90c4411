"""The closed-loop benchmark: ``inflight bench run`` (one sweep) and ``bench compare`` (one
``inflight up`` per policy, the same sweep on each), and the slowing-model scenario."""
