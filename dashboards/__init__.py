"""Grafana dashboards (built with grafana-foundation-sdk; generated JSON committed) and
Prometheus recording/alerting rules for saturation. Built by ``inflight dashboards``.
"""
