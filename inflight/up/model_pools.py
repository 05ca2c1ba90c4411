"""``inflight up --model A --model B``: one router, a model pool each, scaled apart.

Each model has its own replicas (a :class:`Supervisor` running the emulator with
``--served-model-name MODEL``, feeding its own endpoints file), its own pool in the router
(``--model-endpoints-file MODEL=PATH``, :mod:`router.model_pools`), and its own KEDA+HPA loop
on the scaler, whose trigger metadata carries ``model: MODEL`` (the scaler reads that
pool's L, ``router_inflight_requests{model="MODEL"}``) and its own ``metricName``, as one
ScaledObject a model would in Kubernetes (``manifests/overlays/two-models``). The rest of
the stack (Prometheus, the scaler, the timeline of totals, restarts) is
:class:`inflight.up.stack.Stack`'s.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inflight import names
from inflight.planes.autoscaler import Autoscaler, Observation
from inflight.planes.scaler_client import ScalerClient
from inflight.procs import ManagedProcess
from inflight.statedir import ENDPOINTS
from inflight.up.stack import Stack, autoscale_config
from inflight.up.supervisor import Supervisor, SupervisorConfig

if TYPE_CHECKING:
    from inflight.up.cli import UpSettings

_NOT_METRIC = re.compile(r"[^A-Za-z0-9_.-]")


def log_dir(logs: Path, index: int) -> Path:
    """Model ``index``'s replicas' logs and ready files: a folder each, since every
    :class:`Supervisor` numbers its replicas from 1 (one folder for all made model a's
    replica 1 and model b's share ``replica-1.ready.json``, each reading the other's port)."""
    return logs / f"model-{index}"


def endpoints_file(base: Path, index: int) -> Path:
    """Model ``index``'s endpoints file beside the stack's ``endpoints.json``."""
    return base.with_name(f"endpoints.{index}.json")


def metric_name(model: str, index: int) -> str:
    """A ``metricName`` for model ``index`` (letters, digits, ``_.-``; ≤ 63 characters).

    >>> metric_name("meta-llama/Llama-3.1-8B", 0)
    'inflight-0-meta-llama-Llama-3.1-8B'
    """
    return f"{names.DEFAULT_METRIC_NAME}-{index}-{_NOT_METRIC.sub('-', model)}"[:63]


def router_source(models: Sequence[str], base: Path) -> list[str]:
    """The router's flags for one pool a model, each fed by its own file."""
    out: list[str] = []
    for i, model in enumerate(models):
        out += ["--model-endpoints-file", f"{model}={endpoints_file(base, i)}"]
    return out


@dataclass
class Supervisors:
    """One :class:`Supervisor` a model, seen whole by the stack (sums, unions)."""

    each: dict[str, Supervisor]

    @property
    def desired(self) -> int:
        return sum(s.desired for s in self.each.values())

    @property
    def ready(self) -> int:
        return sum(s.ready for s in self.each.values())

    @property
    def live(self) -> int:
        return sum(s.live for s in self.each.values())

    @property
    def all_processes(self) -> list[ManagedProcess]:
        return [p for s in self.each.values() for p in s.all_processes]

    @property
    def ports_used(self) -> set[int]:
        return {p for s in self.each.values() for p in s.ports_used}

    def ready_urls(self) -> list[str]:
        return [u for s in self.each.values() for u in s.ready_urls()]

    def set_desired(self, n: int) -> None:
        """Each model's count (the stack's start: ``--replicas`` or the minimum)."""
        for s in self.each.values():
            s.set_desired(n)

    def tick(self) -> None:
        for s in self.each.values():
            s.tick()

    def stop_all(self) -> list[str]:
        return [left for s in self.each.values() for left in s.stop_all()]


@dataclass
class Autoscalers:
    """One KEDA+HPA loop a model, ticked together by the stack's main loop."""

    each: dict[str, Autoscaler]
    clients: dict[str, ScalerClient]
    address: str
    metadata: dict[str, dict[str, str]]

    def tick(self, now_s: float) -> bool:
        polled = False
        for autoscaler in self.each.values():
            polled = autoscaler.tick(now_s) or polled
        return polled

    def activate(self) -> None:
        """The whole router's activation: each model's loop follows its own instead."""

    @property
    def scaler(self) -> ScalerClient | None:
        return None

    @scaler.setter
    def scaler(self, _client: ScalerClient) -> None:
        """The scaler restarted: a fresh client a model (as the stack makes its own)."""
        for model, autoscaler in self.each.items():
            old = self.clients[model]
            client = ScalerClient(self.address, self.metadata[model])
            autoscaler.scaler = client
            client.watch_activation(autoscaler.activate)
            self.clients[model] = client
            old.close()


class ModelsStack(Stack):
    """:class:`Stack` with a model pool, replicas and scaling loop a model."""

    def __init__(self, config: UpSettings) -> None:
        super().__init__(config)
        base = self.state.path(ENDPOINTS)
        self.models = config.models
        self.supervisor = Supervisors(  # type: ignore[assignment]  # the same interface, summed
            {
                model: Supervisor(
                    command=config.replica_command_for(model),
                    endpoints_file=endpoints_file(base, i),
                    log_dir=log_dir(self.state.logs, i),
                    config=SupervisorConfig(
                        startup_timeout_s=config.startup_timeout_s,
                        health_timeout_s=config.replica_health_timeout_s,
                    ),
                    drained=self._drained,
                    warmth=self._warmth,
                )
                for i, model in enumerate(self.models)
            }
        )

    def model_metadata(self, model: str) -> dict[str, str]:
        """Model ``model``'s trigger metadata: the stack's, with its model and metric name."""
        index = self.models.index(model)
        return {
            **self.config.trigger_metadata,
            names.META_MODEL: model,
            names.META_METRIC_NAME: metric_name(model, index),
        }

    def observe_model(self, model: str) -> Observation:
        """What the router says of ``model``'s pool: its L and ready endpoints."""
        status = self._status()
        slots = self.config.slots_per_replica
        pools = {m.get("model"): m for m in (status or {}).get("models") or []}
        pool: dict[str, Any] | None = pools.get(model)
        if pool is None:
            return Observation(None, self.supervisor.each[model].ready, slots)  # type: ignore[attr-defined]
        ready = sum(1 for ep in pool.get("endpoints", []) if ep.get("state") == "ready")
        inflight = pool.get("inflight")
        return Observation(
            float(inflight) if isinstance(inflight, int | float) else None, ready, slots
        )

    def _start_autoscaler(self, now_s: float) -> None:
        cfg = self.config
        address = f"127.0.0.1:{self.scaler_ports[0]}"
        each: dict[str, Autoscaler] = {}
        clients: dict[str, ScalerClient] = {}
        metadata = {model: self.model_metadata(model) for model in self.models}
        supervisors: dict[str, Supervisor] = self.supervisor.each  # type: ignore[attr-defined]
        for model in self.models:
            sup = supervisors[model]
            client = ScalerClient(address, metadata[model])
            autoscaler = Autoscaler(
                scaler=client,
                config=autoscale_config(cfg),
                get_replicas=lambda sup=sup: sup.desired,  # type: ignore[misc]
                set_replicas=sup.set_desired,
                observe=lambda model=model: self.observe_model(model),  # type: ignore[misc]
                record=self.state.append_decision,
                wall_clock=time.time,
            )
            autoscaler.start(now_s)
            client.watch_activation(autoscaler.activate)
            each[model], clients[model] = autoscaler, client
        self.autoscaler = Autoscalers(each, clients, address, metadata)  # type: ignore[assignment]

    def shutdown(self) -> list[str]:
        autoscalers = self.autoscaler
        if isinstance(autoscalers, Autoscalers):
            for client in autoscalers.clients.values():
                client.close()
        return super().shutdown()
