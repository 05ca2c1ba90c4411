"""PNG plots (matplotlib, Agg backend) from result documents, so plots can be redrawn from files.

* ``sweep_plot``: throughput and p50 per concurrency, one line per policy;
* ``timeseries_plot``: per run, L at the router and client λ over time with the replica
  count: the QPS fallacy made visible (λ falls while L stays at capacity).

All times are seed seconds from the run's start (``t0_unix``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from inflight.measure.run_rows import (
    ClosedLoopRequest,
    OpenLoopRequest,
    RouterSampleRow,
    TimelineRow,
    columns,
    named,
)
from inflight.measure.stats import rate_series

SENT_S = columns(OpenLoopRequest).index("sent_s")

LAMBDA_WINDOW_S = 10.0  # seed seconds: the seed's QPS window, so the plot shows what it saw


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def sweep_plot(runs: Mapping[str, Mapping[str, Any]], path: Path, title: str = "") -> Path:
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, run in runs.items():
        levels = sorted(run["levels"], key=lambda lv: lv["concurrency"])
        cs = [lv["concurrency"] for lv in levels]
        marker = "o" if run.get("valid", True) else "x"
        label = name + ("" if run.get("valid", True) else " (INVALID)")
        ax1.plot(cs, [lv["throughput_rps"] for lv in levels], marker=marker, label=label)
        ax2.plot(cs, [lv["e2e_p50_s"] for lv in levels], marker=marker, label=label)
    all_cs = sorted({lv["concurrency"] for run in runs.values() for lv in run["levels"]})
    for ax, ylabel in ((ax1, "throughput (req/s, seed time)"), (ax2, "p50 latency (s, seed time)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_cs, [str(c) for c in all_cs])
        ax.set_ylim(bottom=0)
        ax.set_xlabel("concurrency (closed-loop workers)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or "throughput and p50 per concurrency")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def timeseries_plot(
    runs: Mapping[str, Mapping[str, Any]],
    path: Path,
    title: str = "",
    slots_per_replica: int = 4,
    phases: Sequence[tuple[float, str]] = (),
) -> Path:
    """One panel per run: L and capacity (slots × ready replicas) left, λ right.

    ``phases``: (seed seconds after the first level's start, label) marks drawn as
    vertical lines, for the slowing-model scenario whose one level changes over time.
    """
    plt = _pyplot()
    n = len(runs)
    fig, axes = plt.subplots(n, 1, figsize=(11, 3.2 * n), squeeze=False, sharex=False)
    for ax, (name, run) in zip(axes[:, 0], runs.items(), strict=True):
        samples = named(RouterSampleRow, run["router_samples"])
        ts = [s.t_s for s in samples]
        ax.step(
            ts,
            [s.ready * slots_per_replica for s in samples],
            where="post",
            color="tab:gray",
            lw=3,
            alpha=0.5,
            label=f"capacity = {slots_per_replica} × ready replicas",
        )
        ax.plot(
            ts, [s.inflight for s in samples], lw=0.9, color="tab:blue", label="L (router)",
            zorder=5,
        )  # fmt: skip
        if run.get("timeline"):
            tl = named(TimelineRow, run["timeline"])
            ax.step(
                [p.t_s for p in tl],
                [p.desired * slots_per_replica for p in tl],
                where="post",
                color="tab:red",
                lw=1,
                ls="--",
                label=f"{slots_per_replica} × desired replicas",
            )
        for i, lv in enumerate(run["levels"]):
            a = (lv["start_t"] - run["t0_unix"]) / run["time_scale"]
            b = (lv["end_t"] - run["t0_unix"]) / run["time_scale"]
            ax.axvspan(a, b, color="0.9" if i % 2 else "0.95", zorder=0)
            ax.text(
                a,
                0.98,
                f" c={lv['concurrency']}",
                transform=ax.get_xaxis_transform(),
                va="top",
                fontsize=7,
            )
            if i == 0:
                for offset, label in phases:
                    ax.axvline(a + offset, color="0.4", lw=0.8, ls=":")
                    ax.text(
                        a + offset,
                        0.04,
                        f" {label}",
                        transform=ax.get_xaxis_transform(),
                        fontsize=7,
                    )
        ax.set_ylim(bottom=0)
        ax.set_ylabel("requests in flight")
        ax.set_xlabel("seed seconds since start")
        ax2 = ax.twinx()
        ends = [r.end_s for r in named(ClosedLoopRequest, run["requests"])]
        if ends and ts:
            lam = rate_series(ends, min(ts), max(ts), LAMBDA_WINDOW_S, 1.0)
            ax2.plot([p[0] for p in lam], [p[1] for p in lam], color="tab:orange", lw=0.8)
        ax2.set_ylim(bottom=0)
        ax2.set_ylabel(f"λ (completions/s, {LAMBDA_WINDOW_S:.0f} s window)", color="tab:orange")
        ax.set_title(name, fontsize=9)
        ax.legend(loc="center left", fontsize=7)
    fig.suptitle(title or "L and λ over time with the replica count")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def pareto_plot(doc: Mapping[str, Any], path: Path, title: str = "") -> Path:
    """Replica-seconds ratio (x, lower better) against SLO attainment (y, higher better),
    one point per policy of an open-loop comparison (``inflight.measure.openloop_report``); the
    Pareto front's points are filled and joined. Without a static-maximum run, x is
    replica-seconds. With the document's ``frontier``, the fixed fleets are grey squares and
    the static frontier a grey line through them (from fixed:0 at the origin): a policy
    below it does worse than a static fleet, or a mix of two, for what it spends."""
    plt = _pyplot()
    x_key = doc.get("pareto_x", "replica_seconds_ratio")
    fig, ax = plt.subplots(figsize=(7, 5))
    front: list[tuple[float, float]] = []
    for name, run in doc["runs"].items():
        x, y = run.get(x_key), run.get("slo_attainment")
        if x is None or y is None:
            continue
        on = bool(run.get("pareto"))
        valid = run.get("valid", True)
        if valid:
            ax.scatter([x], [100 * y], s=60, marker="o", edgecolors="tab:blue", zorder=3,
                       facecolors="tab:blue" if on else "none")  # fmt: skip
        else:
            ax.scatter([x], [100 * y], s=60, marker="x", color="tab:red", zorder=3)
        ax.annotate(
            name + ("" if valid else " (INVALID)"),
            (x, 100 * y),
            textcoords="offset points",
            xytext=(5, 4),
            fontsize=7,
        )
        if on:
            front.append((x, 100 * y))
    if front:
        front.sort()
        ax.plot([p[0] for p in front], [p[1] for p in front], color="tab:blue", lw=1, alpha=0.6,
                label="Pareto front")  # fmt: skip
    drew_frontier = _draw_static_frontier(ax, doc, x_key)
    if front or drew_frontier:
        ax.legend(fontsize=8, loc="lower right")
    ax.set_xlabel(
        "replica-seconds ÷ static maximum's" if x_key == "replica_seconds_ratio"
        else "replica-seconds (seed)"
    )  # fmt: skip
    ax.set_ylabel("SLO attainment (% of requests sent)")
    ax.grid(True, alpha=0.3)
    fig.suptitle(title or "cost against SLO attainment, one point per policy", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _draw_static_frontier(ax: Any, doc: Mapping[str, Any], x_key: str) -> bool:
    """The fixed fleets and the line through those on the frontier; False when none."""
    fr = doc.get("frontier") or {}
    fleets = [
        (name, f) for name, f in (fr.get("fleets") or {}).items()
        if f.get(x_key) is not None and f.get("slo_attainment") is not None
    ]  # fmt: skip
    if not fleets:
        return False
    for name, f in fleets:
        x, y = f[x_key], 100 * f["slo_attainment"]
        ax.scatter([x], [y], s=30, marker="s", color="0.45", zorder=2,
                   alpha=1.0 if f.get("valid", True) else 0.3)  # fmt: skip
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, -10), fontsize=6,
                    color="0.35")  # fmt: skip
    line = sorted((f[x_key], 100 * f["slo_attainment"]) for _, f in fleets if f.get("on_frontier"))
    if line:
        xs, ys = [0.0, *[p[0] for p in line]], [0.0, *[p[1] for p in line]]
        right = max(
            [p[0] for p in line]
            + [r[x_key] for r in doc.get("runs", {}).values() if r.get(x_key) is not None]
        )
        xs.append(right)
        ys.append(line[-1][1])
        ax.plot(xs, ys, color="0.45", lw=1.2, ls="--", zorder=1,
                label=f"static frontier ({fr.get('source')})")  # fmt: skip
    # The line starts at the origin; keep the view on the measured points.
    ys_all = [100 * f["slo_attainment"] for _, f in fleets] + [
        100 * r["slo_attainment"]
        for r in doc.get("runs", {}).values()
        if r.get("slo_attainment") is not None
    ]
    ax.set_ylim(bottom=max(0.0, min(ys_all) - 5), top=min(102.0, max(ys_all) + 3))
    ax.set_xlim(left=0.0)
    return True


def openloop_timeseries_plot(
    runs: Mapping[str, Mapping[str, Any]],
    path: Path,
    title: str = "",
    slots_per_replica: int = 4,
    rate_window_s: float = 30.0,
) -> Path:
    """One panel per open-loop run (``inflight.bench.openloop.run`` documents): L at the router,
    slots of the replicas that exist (``live``, or ``ready`` in older timelines) and of
    the desired count, and the arrival rate sent (right axis), over seed time."""
    plt = _pyplot()
    n = len(runs)
    fig, axes = plt.subplots(n, 1, figsize=(11, 3.0 * n), squeeze=False, sharex=True)
    for ax, (name, run) in zip(axes[:, 0], runs.items(), strict=True):
        # (t_s, L): the simulator's runs (inflight.sim.cli) have those two columns only.
        samples = [(t_s, inflight) for t_s, inflight, *_ in run["router_samples"]]
        ax.plot([t for t, _ in samples], [n for _, n in samples], lw=0.8, color="tab:blue",
                label="L (router)", zorder=5)  # fmt: skip
        timeline = named(TimelineRow, run["timeline"])
        tl = [p for p in timeline if p.t_s >= 0] or timeline[-1:]
        field = run.get("replica_field", "live")
        if tl:
            ts = [0.0, *[p.t_s for p in tl]]
            start = [p for p in timeline if p.t_s < 0][-1:] or tl[:1]
            live = [start[0].counted, *[p.counted for p in tl]]
            desired = [start[0].desired, *[p.desired for p in tl]]
            ax.step(ts, [slots_per_replica * v for v in live], where="post", color="tab:gray",
                    lw=3, alpha=0.5, label=f"{slots_per_replica} × {field} replicas")  # fmt: skip
            ax.step(ts, [slots_per_replica * v for v in desired], where="post", color="tab:red",
                    lw=1, ls="--", label=f"{slots_per_replica} × desired")  # fmt: skip
        ax.set_ylim(bottom=0)
        ax.set_ylabel("requests in flight")
        ax.set_title(
            f"{name}: SLO attainment {100 * (run.get('slo_attainment') or 0):.1f} %, "
            f"{run.get('replica_seconds', 0):.0f} replica-s",
            fontsize=9,
        )
        ax.legend(loc="upper left", fontsize=7)
        # By the column's name, not as OpenLoopRequest rows: the simulator's runs
        # (inflight.sim.cli._plot_run) hold only the columns up to sent_s.
        sent = [r[SENT_S] for r in run["requests"]]
        end_s = run.get("scenario", {}).get("duration_s") or (max(sent) if sent else 0.0)
        if sent:
            lam = rate_series(sent, 0.0, end_s, rate_window_s, rate_window_s / 6)
            ax2 = ax.twinx()
            ax2.plot([p[0] for p in lam], [p[1] for p in lam], color="tab:orange", lw=0.8)
            ax2.set_ylim(bottom=0)
            ax2.set_ylabel(f"arrivals/s ({rate_window_s:.0f} s window)", color="tab:orange")
    axes[-1, 0].set_xlabel("seed seconds since the first request was due")
    fig.suptitle(title or "open loop: L, replicas and arrivals over time")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
