"""One open-loop run against a router, measured: the shared part of ``bench run`` and
``bench compare`` in open-loop mode, and ``bench run --arrivals|--trace`` itself (:func:`main`).

It sends the plan (:func:`inflight.bench.openloop.sender.run_open_loop`), reads the replica
timeline of
``inflight up`` if there is one, and measures with :func:`inflight.measure.slo.run_measures` (the
function the simulator calls too): outcomes from the client's records
(:func:`inflight.measure.slo.outcome_from_record`), replica-seconds of the *live* replicas over the
traffic window [0, end of the traffic] (the same window for every policy, so the ratio
compares like with like), changes and reversals of the desired count. The document keeps
every request, router sample and timeline point, in seed seconds from the start.

A trace window's warm-up (``--trace-warmup-s``, as ``inflight sim`` replays it) is sent
before the window and measured out as the simulator does (:mod:`inflight.measure.warmup`):
the measures count only the window's requests (its own are in ``warmup_requests``, with
``sent_s`` < 0, and summed up in ``warmup``), replica-seconds are those of [0, end], and
Little's Law takes the warm-up's requests still open after 0 out of the router's L.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from inflight import statedir as state
from inflight.bench.openloop.sender import (
    OpenLoopRun,
    SentRequest,
    littles_law,
    replica_points,
    run_open_loop,
)
from inflight.bench.progress import Bars
from inflight.bench.target import BenchError, discover_model, router_target
from inflight.control.hold_order import HoldClassError, HoldPlan, plan_from_classes
from inflight.measure.classes import class_measures, class_table
from inflight.measure.results import ResultFileExists, check_writable, dumps, write_new
from inflight.measure.run_rows import OpenLoopRequest, RouterSampleRow, as_row, columns
from inflight.measure.slo import Outcome, outcome_from_record, run_measures, value_at
from inflight.measure.stats import MAX_LITTLES_LAW_ERROR, percentile
from inflight.measure.warmup import warmup_summary
from inflight.workload.plan import OpenLoopPlan, plan_from_args

SCHEMA_RUN = "inflight-bench-openloop-run/1"

# A run is invalid when the sender itself fell behind its schedule by more than this many
# seed seconds at the 99th percentile: the arrivals were then not the planned ones.
MAX_SEND_LAG_P99_S = 0.25


async def send_plan(
    *,
    router_url: str,
    plan: OpenLoopPlan,
    time_scale: float,
    model: str | None,
    sample_interval_s: float,
    progress_prefix: str = "",
    progress: bool = True,
) -> tuple[OpenLoopRun, str]:
    """Send the plan to the router; return the raw run and the model name used."""
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        name = model or await discover_model(session, router_url)
        bars = Bars(prefix=progress_prefix, enabled=progress)
        label = f"open loop {plan.name}"
        if plan.warmup:
            label += f" (first a warm-up of {len(plan.warmup)})"
        try:
            run = await run_open_loop(
                session,
                router_url,
                name,
                plan.requests,
                time_scale=time_scale,
                drain_s=plan.drain_s,
                end_s=plan.end_s,
                sample_interval_s=sample_interval_s,
                on_done=bars(label, len(plan.warmup) + len(plan.requests)),
                warmup=plan.warmup,
                warmup_s=plan.warmup_s,
            )
        finally:
            bars.close()
    return run, name


def hold_plan(plan: OpenLoopPlan) -> HoldPlan | None:
    """The router's classes the plan names (``--priority-class``, ``--max-late-s``), None
    without; ValueError naming the flag."""
    if not plan.priority_classes:
        return None
    try:
        return plan_from_classes(list(plan.priority_classes), plan.max_late_s)
    except HoldClassError as exc:
        raise ValueError(f"--priority-class: {exc}") from None


def priority_up_args(plan: OpenLoopPlan) -> list[str]:
    """``inflight up``'s flags for the plan's classes and bound (seed seconds, as ``up``
    takes them; it scales them to the router's real seconds)."""
    hold_plan(plan)  # a bad class is refused before any stack starts
    argv = [f"--priority-class={spec}" for spec in plan.priority_classes]
    if plan.max_late_s is not None:
        argv += ["--max-late-s", f"{plan.max_late_s:g}"]
    return argv


def run_document(
    run: OpenLoopRun,
    plan: OpenLoopPlan,
    timeline_rows: Sequence[dict[str, Any]],
    *,
    policy: str | None,
    frozen: bool,
    url: str,
    model: str,
    created_at: str,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Measure one run and lay it out as its results file (pure)."""
    s = run.time_scale
    outcomes = [outcome_from_record(x.record, run.t0, s, unfinished=x.unfinished) for x in run.sent]
    live, desired, field = replica_points(timeline_rows, run.t0, s)
    measures = run_measures(outcomes, live, desired, plan.slo, 0.0, plan.end_s)
    priorities = [x.planned.priority for x in run.sent]
    classes = hold_plan(plan)
    if classes is not None:  # --priority-class: attainment a class, the router's mapping
        names = [c.name for c in classes.classes]
        measures["by_class"] = class_measures(
            outcomes, [names[classes.class_of(p)] for p in priorities], names, plan.slo
        )
    elif any(priorities):  # priorities without the classes: attainment a priority
        label = "priority {}".format
        measures["by_class"] = class_measures(
            outcomes,
            [label(p) for p in priorities],
            [label(p) for p in sorted(set(priorities))],
            plan.slo,
        )
    ll = littles_law(run)
    lag = [x / s for x in run.send_lag_s]
    lag_stats = {
        "p50": percentile(lag, 50),
        "p99": percentile(lag, 99),
        "max": max(lag),
    }
    reasons: list[str] = []
    if lag_stats["p99"] > MAX_SEND_LAG_P99_S:
        reasons.append(
            f"the sender fell behind its schedule: p99 lag {lag_stats['p99']:.2f} seed s "
            f"> {MAX_SEND_LAG_P99_S}"
        )
    if ll["error"] is not None and ll["error"] > MAX_LITTLES_LAW_ERROR:
        reasons.append(
            f"Little's Law: router L {ll['l_router']:.2f} vs client λ·W {ll['lambda_w']:.2f} "
            f"({100 * ll['error']:.1f} % > {100 * MAX_LITTLES_LAW_ERROR:.0f} %)"
        )
    if ll["l_router"] is None:
        reasons.append("no router sample during the run (Little's Law not checked)")
    held = {n for t, n in desired if 0.0 < t <= plan.end_s}
    if desired and frozen and len(held | {value_at(desired, 0.0)}) > 1:
        reasons.append("the replica count changed during a fixed-replica run")
    if not timeline_rows:
        notes = ["no timeline.jsonl: replica-seconds are 0 (not run under inflight up)"]
    elif field != "live":
        notes = ["timeline.jsonl has no 'live' field: replica-seconds integrate 'ready'"]
    else:
        notes = []

    def rel(t: float) -> float:
        return round((t - run.t0) / s, 4)

    def rows(sent: Sequence[SentRequest], seen: Sequence[Outcome]) -> list[list[Any]]:
        return [
            as_row(
                OpenLoopRequest(
                    index=x.index,
                    t_s=x.planned.t_s,
                    prompt_tokens=x.planned.prompt_tokens,
                    max_tokens=x.planned.max_tokens,
                    sent_s=round(o.sent_s, 4),
                    first_s=None if o.first_s is None else round(o.first_s, 4),
                    end_s=None if o.end_s is None else round(o.end_s, 4),
                    output_tokens=o.output_tokens,
                    ok=o.ok,
                    cause=o.cause,
                    error=x.record.error[:300],
                )
            )
            for x, o in zip(sent, seen, strict=True)
        ]

    warm: dict[str, Any] = {}
    if plan.warmup or run.warmup:  # measured out (inflight.measure.warmup)
        warm_outcomes = [
            outcome_from_record(x.record, run.t0, s, unfinished=x.unfinished) for x in run.warmup
        ]
        # seed s the warm-up's requests were still in flight inside the window: littles_law's
        # share of the window's L (inflight.measure.warmup), back to an integral
        carried = ll.get("l_warmup_carried", 0.0) * max(0.0, (run.end_t - run.t0) / s)
        warm = {
            "warmup": warmup_summary(
                len(plan.warmup),
                len(run.warmup),
                sum(1 for o in warm_outcomes if o.ok),
                sum(1 for x in run.warmup if x.unfinished),
                run.warmup_s,
                live,
                carried,
            ),
            "warmup_requests": rows(run.warmup, warm_outcomes),
        }
    requests = rows(run.sent, outcomes)
    return {
        "schema": SCHEMA_RUN,
        "created_at": created_at,
        "command": ["inflight", *sys.argv[1:]],
        "url": url,
        "model": model,
        "policy": policy,
        "time_scale": s,
        "units": "seed time: wall seconds / time_scale; rates per seed second",
        "frozen": frozen,
        "valid": not reasons,
        "invalid_reasons": reasons,
        "notes": notes,
        "t0_unix": run.t0,
        "scenario": plan.scenario_meta(),
        **measures,
        "replica_field": field,
        "littles_law": ll,
        "send_lag_s": lag_stats,
        "router_sample_errors": run.sample_errors,
        "requests_columns": columns(OpenLoopRequest),
        "requests": requests,
        **warm,
        "router_samples_columns": columns(RouterSampleRow),
        "router_samples": [[rel(x.t), x.inflight, x.queued, x.ready] for x in run.samples],
        "timeline_columns": ["t_s", "desired", field],
        "timeline": [[round(t, 4), d, n] for (t, n), (_, d) in zip(live, desired, strict=True)],
        **(extra or {}),
    }


def read_timeline_rows(path: Path | None) -> list[dict[str, Any]]:
    """The rows of an ``inflight up`` timeline.jsonl (none without a path or file)."""
    return [] if path is None else state.read_jsonl(path)


def run_markdown(doc: dict[str, Any]) -> str:
    """A one-run summary: the open-loop comparison's table with one row."""
    from inflight.measure.openloop_report import build_comparison, comparison_markdown

    meta = {
        "created_at": doc["created_at"],
        "command": doc["command"],
        "time_scale": doc["time_scale"],
        "source": "live",
        **doc["scenario"],
        "max_replicas": doc["scenario"].get("max_replicas") or 0,
    }
    label = doc.get("policy") or "run"
    md = comparison_markdown(build_comparison(meta, {label: doc}), notes=doc.get("notes", ()))
    if table := class_table({label: doc}):
        md += f"\n## SLO attainment a priority class\n\n{table}"
    return md


def main(args: argparse.Namespace) -> int:
    """``inflight bench run --arrivals …|--trace …``: one open-loop run, measured."""
    try:
        plan = plan_from_args(args)
        hold_plan(plan)  # --priority-class: the labels of attainment a class
        check_writable([args.results_file, args.summary_file], args.force)
        url, time_scale, stack = router_target(args)
        run, model = asyncio.run(
            send_plan(
                router_url=url,
                plan=plan,
                time_scale=time_scale,
                model=args.model,
                sample_interval_s=args.sample_interval_s,
                progress=not args.no_progress,
            )
        )
        rows = read_timeline_rows(args.state_dir / state.TIMELINE if args.state_dir else None)
        doc = run_document(
            run,
            plan,
            rows,
            policy=args.policy or (stack.policy if stack else None),
            frozen=args.frozen,
            url=url,
            model=model,
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        write_new(args.results_file, dumps(doc), args.force)
        md = run_markdown(doc)
        if args.summary_file is not None:
            write_new(args.summary_file, md, args.force)
    except (BenchError, ResultFileExists, ValueError) as exc:
        print(f"inflight bench run: {exc}", file=sys.stderr)
        return 2
    if args.plot_dir is not None:
        from inflight.measure.plots import openloop_timeseries_plot

        label = doc.get("policy") or "run"
        openloop_timeseries_plot(
            {label: doc}, args.plot_dir / f"{args.results_file.stem}-timeseries.png"
        )
    print(md)
    return 0 if doc["valid"] else 1
