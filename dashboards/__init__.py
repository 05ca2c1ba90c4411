"""Grafana dashboards (built with grafana-foundation-sdk; generated JSON committed) and
Prometheus recording/alerting rules for saturation. Built by ``inflight dashboards``.

Where things are:

* ``signals``: every PromQL expression, from ``inflight.names`` only (dashboard and
  recording-rule flavours, the seed's QPS rule and the saturation rule side by side);
* ``prom_rules``: the rules' one source of truth (recordings, alerts with ``for:``,
  summaries and runbook links);
* ``panels``, ``saturation``, ``scaler``: the two dashboards;
* ``build``: renders ``json/*.json``, ``rules/inflight.rules.yaml`` and the two files in
  ``manifests/generated/``; ``cli``: ``inflight dashboards build [--check]``;
* ``rules/tests/``: promtool unit tests for every alert.
"""
