"""``inflight sim run|compare``: the stack in virtual time, on the bench's workloads.

``run`` simulates one policy on one workload and writes ``run.json`` (the live bench's
measures), ``timeline.jsonl``, ``decisions.jsonl`` and ``requests.jsonl``. ``compare``
simulates several policies on several seeds (every policy sees the same requests for a
seed) and writes ``comparison.json`` and ``comparison.md``. Output directories are never
overwritten (``bench.results.new_out_dir``). ``trace-from-prometheus`` is registered by
``sim.prom_trace`` when that module is there.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.arrivals import parse_arrivals
from bench.lengths import LengthDist, parse_length
from bench.results import ResultFileExists, new_out_dir, write_new
from bench.scenarios import MAX_TOKENS, PROMPT_TOKENS, get_scenario, plan_requests
from bench.slo import DEFAULT_SLO, SloSpec
from bench.trace import PlannedRequest, TraceError, read_trace
from external_scaler.errors import MetadataError
from external_scaler.metadata import parse_metadata
from inflight import names
from sim import report
from sim.core import SCALER_POLICIES, SimConfig, fixed_replicas, policy_names, simulate
from sim.peers import catalog

# Without a scenario: `inflight up`'s replica defaults and the reference start-up.
DEFAULT_MIN_REPLICAS, DEFAULT_MAX_REPLICAS, DEFAULT_STARTUP_S = 1, 2, 30.0
DEFAULT_SEED = 1
DEFAULT_SEEDS = (1, 2, 3)


# Trigger keys the simulator sets itself (from --policy, its time-scale 1 and the replica's
# slots), as inflight up sets them from its flags.
FROM_FLAGS = frozenset({names.META_POLICY, names.META_TIME_SCALE, names.META_SLOTS_PER_REPLICA})


class UsageError(ValueError):
    """A bad flag value; the message names the flag."""


@dataclass(frozen=True)
class Workload:
    """The requests of one seed, and what they came from."""

    source: str  # "scenario:ramp", "trace:FILE", "arrivals:SPEC"
    end_s: float
    min_replicas: int
    max_replicas: int
    startup_s: float
    trace: tuple[PlannedRequest, ...] | None  # a trace is the same on every seed
    args: argparse.Namespace

    def plan(self, seed: int) -> list[PlannedRequest]:
        if self.trace is not None:
            return list(self.trace)
        a = self.args
        if a.scenario:
            sc = get_scenario(a.scenario)
            arrivals = sc.arrivals
        else:
            arrivals = parse_arrivals(a.arrivals)
        return plan_requests(arrivals, _lengths(a, "prompt"), _lengths(a, "max"), seed)

    def meta(self, seed: int | None) -> dict[str, Any]:
        a = self.args
        return {
            "source": self.source,
            "seed": seed,
            "end_s": self.end_s,
            "prompt_tokens": None if self.trace is not None else _lengths(a, "prompt").text,
            "max_tokens": None if self.trace is not None else _lengths(a, "max").text,
            "min_replicas": self.min_replicas,
            "max_replicas": self.max_replicas,
            "startup_s": self.startup_s,
        }


def _lengths(a: argparse.Namespace, which: str) -> LengthDist:
    if which == "prompt":
        if a.prompt_tokens:
            return parse_length(a.prompt_tokens, "--prompt-tokens")
        return get_scenario(a.scenario).prompt_tokens if a.scenario else PROMPT_TOKENS
    if a.max_tokens:
        return parse_length(a.max_tokens, "--max-tokens")
    return get_scenario(a.scenario).max_tokens if a.scenario else MAX_TOKENS


def workload(a: argparse.Namespace) -> Workload:
    """The workload flags, checked (every error names its flag or trace line)."""
    sources = [x for x in (a.scenario, a.trace, a.arrivals) if x]
    if len(sources) != 1:
        raise UsageError("give exactly one of --scenario, --trace, --arrivals")
    lo, hi, startup = DEFAULT_MIN_REPLICAS, DEFAULT_MAX_REPLICAS, DEFAULT_STARTUP_S
    trace: tuple[PlannedRequest, ...] | None = None
    if a.scenario:
        sc = get_scenario(a.scenario)
        lo, hi, startup = sc.min_replicas, sc.max_replicas, sc.startup_s
        end_s, source = sc.arrivals.duration_s, f"scenario:{sc.name}"
    elif a.trace:
        if a.prompt_tokens or a.max_tokens:
            raise UsageError("--prompt-tokens/--max-tokens: a --trace gives every length")
        trace = tuple(read_trace(a.trace))
        end_s, source = max(r.t_s for r in trace), f"trace:{a.trace}"
    else:
        end_s, source = parse_arrivals(a.arrivals).duration_s, f"arrivals:{a.arrivals}"
    _lengths(a, "prompt"), _lengths(a, "max")  # bad text fails here, naming the flag
    return Workload(
        source=source,
        end_s=end_s,
        min_replicas=lo if a.min_replicas is None else a.min_replicas,
        max_replicas=hi if a.max_replicas is None else a.max_replicas,
        startup_s=startup if a.startup_s is None else a.startup_s,
        trace=trace,
        args=a,
    )


def parse_scaler_metadata(text: str | None, flag: str = "--scaler-metadata") -> dict[str, str]:
    """``KEY=VALUE,KEY=VALUE`` → dict; keys from ``inflight.names.METADATA_DEFAULTS``."""
    out: dict[str, str] = {}
    if not text:
        return out
    for item in text.split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UsageError(f"{flag}: expected KEY=VALUE, got {item!r}")
        if key not in names.METADATA_DEFAULTS or key in FROM_FLAGS:
            known = ", ".join(k for k in names.METADATA_DEFAULTS if k not in FROM_FLAGS)
            raise UsageError(f"{flag}: unknown key {key!r} (valid keys: {known})")
        if key in out:
            raise UsageError(f"{flag}: key {key!r} given twice")
        out[key] = value.strip()
    try:
        parse_metadata({**names.METADATA_DEFAULTS, **out})
    except MetadataError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    return out


def parse_policy(text: str) -> tuple[str, dict[str, str]]:
    """``saturation[targetSaturation=0.8;scaleDownWindowSeconds=120]`` → (name, overrides)."""
    text = text.strip()
    if "[" in text:
        if not text.endswith("]"):
            raise UsageError(f"--policies: {text!r}: a setting list ends with ']'")
        name, _, inner = text[:-1].partition("[")
        settings = parse_scaler_metadata(inner.replace(";", ","), f"--policies {name}[...]")
        if name not in SCALER_POLICIES:
            raise UsageError(
                f"--policies: {text!r}: only {'/'.join(SCALER_POLICIES)} take settings"
            )
        return name, settings
    return text, {}


def sim_config(
    w: Workload, a: argparse.Namespace, policy: str, overrides: dict[str, str], seed: int
) -> SimConfig:
    try:
        return SimConfig(
            policy=policy,
            min_replicas=w.min_replicas,
            max_replicas=w.max_replicas,
            startup_s=w.startup_s,
            scaler_metadata=overrides,
            drain_s=a.drain_s,
            seed=seed,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _slo(a: argparse.Namespace) -> SloSpec:
    try:
        return SloSpec(a.slo_ttft_s, a.slo_tpot_s)
    except ValueError as exc:
        raise UsageError(f"--slo-ttft-s/--slo-tpot-s: {exc}") from None


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds: expected integers separated by commas, got {text!r}") from None
    if not seeds:
        raise UsageError("--seeds: at least one seed")
    return seeds


# --- commands ------------------------------------------------------------------------------
def _run(a: argparse.Namespace) -> int:
    w = workload(a)
    slo = _slo(a)
    overrides = parse_scaler_metadata(a.scaler_metadata)
    if overrides and a.policy not in SCALER_POLICIES:
        raise UsageError(f"--scaler-metadata: --policy {a.policy} has no scaler trigger")
    config = sim_config(w, a, a.policy, overrides, a.seed)
    out = new_out_dir(a.out_dir, "results", a.force)
    result = simulate(config, w.plan(a.seed), w.end_s)
    body = report.write_run(out, result, slo, w.meta(a.seed), sys.argv, a.force)
    m = body["measures"]
    print(
        f"{a.policy}: {m['requests_sent']} requests, SLO attainment "
        f"{_pct(m['slo_attainment'])}, {m['replica_seconds']:.0f} replica-s "
        f"(mean {m['mean_replicas']:.2f} replicas), {m['changes']} changes; {out}"
    )
    return 0


def _compare(a: argparse.Namespace) -> int:
    w = workload(a)
    slo = _slo(a)
    seeds = _seeds(a.seeds)
    texts = [p for p in (a.policies or default_policies(w.max_replicas)).split(",") if p]
    policies = [parse_policy(p) for p in texts]
    static = next(
        (
            t
            for t, (n, _) in zip(texts, policies, strict=True)
            if fixed_replicas(n) == w.max_replicas
        ),
        None,
    )
    configs = {
        t: [sim_config(w, a, n, o, s) for s in seeds]
        for t, (n, o) in zip(texts, policies, strict=True)
    }
    out = new_out_dir(a.out_dir, "comparisons", a.force)
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for seed_index, seed in enumerate(seeds):
        planned = w.plan(seed)
        for text in texts:
            result = simulate(configs[text][seed_index], planned, w.end_s)
            runs.setdefault(text, {})[seed] = report.measures(result, slo)
            print(f"{text} seed {seed}: SLO attainment {_pct(runs[text][seed]['slo_attainment'])}")
    body = {
        "schema": report.COMPARISON_SCHEMA,
        "command": sys.argv,
        "simulated": True,
        "workload": w.meta(None),
        "seeds": seeds,
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s},
        "policies": texts,
        "static_policy": static,
        "runs": {p: {str(s): m for s, m in by_seed.items()} for p, by_seed in runs.items()},
        "summary": report.summarize(runs, static),
    }
    write_new(out / "comparison.json", json.dumps(body, indent=2, sort_keys=True) + "\n", a.force)
    markdown = report.comparison_markdown(body)
    write_new(out / "comparison.md", markdown, a.force)
    print(markdown)
    return 0


def default_policies(max_replicas: int) -> str:
    """The static maximum, ours, the peers (those in this build), the seed's rule: the
    order of ``inflight bench compare --scenario``."""
    return ",".join([f"fixed:{max_replicas}", "saturation", *catalog(), "qps"])


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f} %"


def _guarded(fn: Any) -> Any:
    def run(a: argparse.Namespace) -> int:
        # The autoscaler logs every decision; the files have them. Warnings stay.
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        logging.getLogger("inflight.up").setLevel(logging.ERROR)
        try:
            return int(fn(a))
        except (UsageError, TraceError, ResultFileExists, ValueError) as exc:
            print(f"inflight sim {a.sim_command}: error: {exc}", file=sys.stderr)
            return 2

    return run


def _workload_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workload (one of --scenario, --trace, --arrivals)")
    g.add_argument("--scenario", help="ramp, spike or diurnal (bench/scenarios.py)")
    g.add_argument(
        "--trace", type=Path, help='JSONL, one {"t", "prompt_tokens", "max_tokens"} a line'
    )
    g.add_argument("--arrivals", help="poisson:T:RATE,T:RATE,... (seed seconds, req/s)")
    g.add_argument("--prompt-tokens", help="N | lognormal:MEAN:SIGMA | uniform:A:B")
    g.add_argument("--max-tokens", help="N | lognormal:MEAN:SIGMA | uniform:A:B")
    s = p.add_argument_group("stack (defaults: the scenario's, else `inflight up`'s)")
    s.add_argument("--min-replicas", type=int)
    s.add_argument("--max-replicas", type=int)
    s.add_argument("--startup-s", type=float, help="replica start-up, seed seconds")
    p.add_argument("--slo-ttft-s", type=float, default=DEFAULT_SLO.ttft_s)
    p.add_argument("--slo-tpot-s", type=float, default=DEFAULT_SLO.tpot_s)
    p.add_argument(
        "--drain-s",
        type=float,
        default=600.0,
        help="how long after the workload's end open requests may finish (then: unfinished)",
    )
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--force", action="store_true", help="write into a non-empty --out-dir")


def register(subparsers: Any) -> None:
    sim = subparsers.add_parser(
        "sim",
        help="the stack's own code in virtual time: simulate a policy on a workload",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    sub = sim.add_subparsers(dest="sim_command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser("run", help="one policy on one workload")
    _workload_flags(run)
    run.add_argument("--seed", type=int, default=DEFAULT_SEED)
    run.add_argument(
        "--policy",
        default="saturation",
        help=f"{', '.join(policy_names())} or fixed:N",
    )
    run.add_argument(
        "--scaler-metadata",
        help="KEY=VALUE,... overrides of the trigger metadata (e.g. targetSaturation=0.8)",
    )
    run.set_defaults(func=_guarded(_run))

    cmp = sub.add_parser("compare", help="several policies on several seeds")
    _workload_flags(cmp)
    cmp.add_argument("--seeds", default=",".join(str(s) for s in DEFAULT_SEEDS))
    cmp.add_argument(
        "--policies",
        help="comma-separated; saturation[KEY=VALUE;...] for a variant "
        f"(default {default_policies(0).replace('fixed:0', 'fixed:MAX')})",
    )
    cmp.set_defaults(func=_guarded(_compare))

    # Hooks: other modules of this package add their own subcommands when present.
    for module_name in ("sim.prom_trace", "sim.tune_cli"):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        register_sub = getattr(module, "register", None)
        if register_sub is not None:
            register_sub(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inflight")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.func(args))
