"""``chaos.json`` and ``chaos.md``: the fault run's table and verdict (pure formatting)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from inflight.bench.chaos.model import FaultReport

SCHEMA = "inflight-bench-chaos/1"

COLUMNS = (
    "requests_sent",
    "requests_failed",
    "failed_on_faulted_replica",
    "lost_other",
    "leaked_slots",
    "wrong_scale_downs",
    "time_to_recover_s",
    "orphans",
)


def chaos_json(
    reports: Sequence[FaultReport], failures: Sequence[str], meta: dict[str, Any]
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        **meta,
        "faults": [asdict(r) for r in reports],
        "bar": {
            "passed": not failures,
            "failures": list(failures),
            "rule": "lost_other = 0, leaked_slots = 0, wrong_scale_downs = 0 (a scale-down "
            "with no evidence is wrong), orphans = 0, every fault recovered, settled before "
            "it, its leak check read every router and replica, no request open after the "
            "drain, a surge raised the replica count, and the streams open during a "
            "scale-down complete",
        },
    }


def _cell(value: Any) -> str:
    return "—" if value is None else str(value)


def chaos_markdown(doc: dict[str, Any]) -> str:
    """The table, then the verdict and what each fault's notes say."""
    lines = [
        f"# Fault run ({doc.get('created_at', '?')})",
        "",
        f"`{' '.join(doc.get('command', []))}`",
        "",
        f"Time-scale {doc.get('time_scale')}; wall time {doc.get('wall_s')} s. "
        "`time_to_recover_s` is wall seconds from the end of the fault (the kill; the hold "
        "on Prometheus lifted; the second router out of discovery; the load drop) until the "
        "stack serves as before it.",
        "",
        "| fault | " + " | ".join(COLUMNS) + " |",
        "|---|" + "---:|" * len(COLUMNS),
    ]
    for f in doc["faults"]:
        lines.append(f"| {f['fault']} | " + " | ".join(_cell(f[c]) for c in COLUMNS) + " |")
    bar = doc["bar"]
    lines += ["", f"**Bar: {'met' if bar['passed'] else 'MISSED'}** ({bar['rule']})."]
    lines += [f"- {why}" for why in bar["failures"]]
    lines += ["", "## Per fault", ""]
    for f in doc["faults"]:
        d = f["details"]
        extra = []
        if d.get("faulted_endpoints"):
            extra.append(f"hit {', '.join(d['faulted_endpoints'])}")
        if "long_streams_open_at_scale_down" in d:
            extra.append(
                f"{d['long_streams_open_at_scale_down']} long stream(s) open at the scale-down, "
                f"{d['long_streams_not_completed']} not completed"
            )
        if d.get("scale_downs"):
            extra.append(
                "scale-downs: "
                + ", ".join(
                    f"{s['from']}→{s['to']} at saturation {s['saturation']}"
                    for s in d["scale_downs"]
                )
            )
        if d.get("orphans"):
            extra.append(f"orphans: {', '.join(d['orphans'])}")
        if "surge_desired_before" in d:
            extra.append(
                f"surge: desired {d['surge_desired_before']} → peak {d['surge_desired_peak']}"
            )
        if d.get("requests_retried_after_refused"):
            extra.append(
                f"{d['requests_retried_after_refused']} request(s) refused at connect, retried"
            )
        for lost in d.get("lost_other_errors", []):
            extra.append(f"lost (router {lost['router']}): {lost['error'][:160]}")
        if d.get("unprobed"):
            extra.append(f"not read by the leak check: {', '.join(d['unprobed'])}")
        if d.get("leaked_detail") and f["leaked_slots"]:
            extra.append(f"leaked: {d['leaked_detail']}")
        extra += d.get("notes", [])
        lines.append(f"- **{f['fault']}**: " + ("; ".join(extra) or "—"))
    return "\n".join(lines) + "\n"
