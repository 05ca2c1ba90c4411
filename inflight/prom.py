"""Start a real Prometheus (Debian's ``prometheus`` binary) on a loopback port it picks.

Prometheus is third-party and writes no ready file, but it binds
``--web.listen-address=127.0.0.1:0`` itself (checked with Debian's 2.42: it listens on a
port from the OS and logs it at info level). We learn that port from /proc, as for any
child that cannot report (:func:`inflight.ports.listening_ports`): Prometheus listens on
exactly one TCP port, its web port. So no port is picked here and handed over, and no
other process can take it in between.

Used by ``inflight up`` and by the test fixture. Targets go through file-based
service discovery (one JSON file per job), so a running Prometheus picks up new
replicas without a restart. Storage lives in the given directory.

Debian bookworm ships Prometheus 2.42: a scraped sample becomes queryable only a
few seconds after the first scrape, so callers poll for data, never sleep.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from inflight.ports import listening_ports
from inflight.procs import ManagedProcess, ProcessError

PROMETHEUS_BINARY = "prometheus"
PROMTOOL_BINARY = "promtool"


def find_prometheus() -> str | None:
    """Path of the ``prometheus`` binary, or None when it is not installed."""
    return shutil.which(PROMETHEUS_BINARY)


@dataclass
class PrometheusServer:
    """A Prometheus process with a generated config, storage in ``data_dir``.

    ``jobs`` maps a job name to its ``host:port`` targets; ``set_targets`` rewrites a
    job's discovery file while Prometheus runs.
    """

    data_dir: Path
    jobs: Mapping[str, Sequence[str]] = field(default_factory=dict)
    scrape_interval_s: float = 1.0
    evaluation_interval_s: float = 1.0
    rule_files: Sequence[Path] = ()
    port: int = 0  # 0: Prometheus binds a port from the OS; the real one is set by start()
    binary: str | None = None
    process: ManagedProcess | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "prometheus.yml"

    def _sd_path(self, job: str) -> Path:
        return self.data_dir / "targets" / f"{job}.json"

    def set_targets(self, job: str, targets: Iterable[str]) -> None:
        """Replace ``job``'s targets (file SD; Prometheus notices the change by itself)."""
        if job not in self.jobs:
            raise ValueError(f"unknown Prometheus job {job!r}; known: {sorted(self.jobs)}")
        path = self._sd_path(job)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": sorted(set(targets)), "labels": {}}]))
        tmp.replace(path)  # atomic: Prometheus never reads half a file

    def write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        scrape_configs = []
        for job, targets in self.jobs.items():
            self.set_targets(job, targets)
            scrape_configs.append(
                {
                    "job_name": job,
                    "scrape_interval": _duration(self.scrape_interval_s),
                    "scrape_timeout": _duration(min(self.scrape_interval_s, 10.0)),
                    "file_sd_configs": [
                        {"files": [str(self._sd_path(job))], "refresh_interval": "1s"}
                    ],
                }
            )
        config = {
            "global": {
                "scrape_interval": _duration(self.scrape_interval_s),
                "evaluation_interval": _duration(self.evaluation_interval_s),
            },
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": scrape_configs,
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def start(
        self,
        ready_timeout_s: float = 30.0,
        on_spawn: Callable[[ManagedProcess], None] | None = None,
    ) -> PrometheusServer:
        """Write the config, spawn Prometheus and poll ``/-/ready``.

        ``on_spawn`` is called with the process as soon as it exists, before the wait, so a
        supervisor can record it (and stop it) even if we are killed while it starts.
        """
        binary = self.binary or find_prometheus()
        if binary is None:
            raise ProcessError(
                "prometheus is not installed; on Debian/Ubuntu run "
                "'apt-get install -y --no-install-recommends prometheus'"
            )
        self.write_config()
        argv = [
            binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_dir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=1d",
            "--web.enable-lifecycle",
            "--log.level=warn",
        ]
        self.process = ManagedProcess(
            argv, name="prometheus", log_path=self.data_dir / "prometheus.log", grace_s=10.0
        ).start()
        if on_spawn is not None:
            on_spawn(self.process)
        deadline = time.monotonic() + ready_timeout_s
        if self.port == 0:
            self.port = _learn_port(self.process, ready_timeout_s)
        self.process.wait_ready(
            f"{self.url}/-/ready", timeout_s=max(0.1, deadline - time.monotonic())
        )
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _learn_port(process: ManagedProcess, timeout_s: float) -> int:
    """The one TCP port Prometheus (told port 0) listens on, read from /proc."""
    deadline = time.monotonic() + timeout_s
    while True:
        ports = listening_ports(process.pid)
        if len(ports) == 1:
            return ports.pop()
        if len(ports) > 1:
            raise ProcessError(
                f"prometheus (pid {process.pid}) listens on {sorted(ports)}; want one port"
            )
        code = process.poll()
        if code is not None:
            raise ProcessError(f"prometheus exited with code {code} before listening")
        if time.monotonic() >= deadline:
            raise ProcessError(
                f"prometheus (pid {process.pid}) not listening after {timeout_s:.1f} s"
            )
        time.sleep(0.02)


def _duration(seconds: float) -> str:
    """Prometheus duration text: 1.0 -> '1s', 0.5 -> '500ms'."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise ValueError(f"duration must be positive, got {seconds} s")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"
