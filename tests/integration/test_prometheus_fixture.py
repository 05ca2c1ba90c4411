"""A real Prometheus scrapes a real HTTP endpoint; the value comes back through its API."""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_api_client import PrometheusConnect
from prometheus_client import CollectorRegistry, Gauge, make_wsgi_app

from tests.support import wait_for


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def test_prometheus_scrapes_a_gauge_and_answers_promql(prometheus_factory) -> None:
    registry = CollectorRegistry()
    gauge = Gauge("inflight_fixture_test_value", "a value for the fixture test", registry=registry)
    gauge.set(42.5)
    httpd = make_server("127.0.0.1", 0, make_wsgi_app(registry), handler_class=_Quiet)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        target = f"127.0.0.1:{httpd.server_port}"
        prom = prometheus_factory(jobs={"fixture": [target]})
        client = PrometheusConnect(url=prom.url, disable_ssl=True)

        def value():
            result = client.custom_query("inflight_fixture_test_value")
            return float(result[0]["value"][1]) if result else None

        assert wait_for(value, timeout_s=30, interval_s=0.25, what="first scraped sample") == 42.5

        gauge.set(7)
        assert wait_for(lambda: value() == 7, timeout_s=30, interval_s=0.25, what="update")
        # The target is labelled by job and instance, as Prometheus does.
        result = client.custom_query("inflight_fixture_test_value")
        assert result[0]["metric"]["job"] == "fixture"
        assert result[0]["metric"]["instance"] == target
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def test_on_spawn_sees_the_process_before_it_is_ready(tmp_path) -> None:
    """A supervisor must be able to record Prometheus before the (slow) readiness wait."""
    from inflight.procs import http_ok
    from inflight.prom import PrometheusServer

    seen = []

    def on_spawn(proc) -> None:
        seen.append((proc.pid, proc.alive()))

    server = PrometheusServer(data_dir=tmp_path / "prom", jobs={})
    try:
        server.start(on_spawn=on_spawn)
        assert server.process is not None
        assert seen == [(server.process.pid, True)]
        assert http_ok(f"{server.url}/-/ready")
    finally:
        server.stop()
    assert not server.process.alive()
