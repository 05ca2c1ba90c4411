"""One scraped history, given both to the simulated Prometheus and to a real one.

A :class:`Scrape` is what the targets exposed at one scrape instant: the router's totals
(which ``routers`` targets share, as ``inflight.sim.scrapes`` models them) and each vLLM
replica's own series. From a list of them:

* :func:`sim_scrapes` records them in the simulator's :class:`~inflight.sim.scrapes.Scrapes`
  (summed as the queries sum them; a sum over no replica is NaN, no series);
* :func:`stored_series` gives what Prometheus' scrape loop writes into its storage: one
  series per target and label set, ``up`` per target (0 on a failed scrape), and a
  staleness marker (``None`` here) for every series a target exposed at the previous
  scrape and does not at this one (a failed scrape, a target removed from discovery, an
  endpoint gone from the router's ``/metrics``). A stretch without scrapes (Prometheus
  itself down, :attr:`Scrape.after_restart` on the first scrape after it) writes nothing
  and no marker;
* :func:`openmetrics` (for ``promtool tsdb create-blocks-from openmetrics``) and
  :func:`remote_write` (Prometheus' remote-write receiver) write those series into a real
  Prometheus. OpenMetrics text cannot carry the staleness marker (Prometheus' marker is
  one NaN bit pattern, 0x7ff0000000000002; its text parser reads ``NaN`` as an ordinary
  NaN), so histories with markers go by remote write, whose samples are raw float64 bits.
  Remote write is hand-encoded here (protobuf ``prometheus.WriteRequest``, snappy's
  literal-only block format): no dependency for a test.
"""

from __future__ import annotations

import math
import struct
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from inflight import names
from inflight.sim import scrapes as S

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs, ``__name__`` included
#: A stored sample: (unix ms, value); value None is Prometheus' staleness marker.
Stored = tuple[int, float | None]

ROUTER_JOB, VLLM_JOB = S.ROUTER_JOB, "vllm"
STALE_NAN_BITS = 0x7FF0000000000002  # prometheus/model/value.StaleNaN
MODEL = "m"


@dataclass(frozen=True)
class Replica:
    """What one vLLM replica exposes, and what the router exposes about it (its endpoint)."""

    usage: float  # vllm:kv_cache_usage_perc
    running: float
    waiting_capacity: float  # waiting, reason="capacity"
    waiting_deferred: float  # waiting, reason="deferred" (not capacity: the query skips it)
    cache_blocks: int
    block_size: int
    endpoint_tokens: float  # the router's router_endpoint_inflight_tokens for it, whole
    endpoint_kv_tokens: float  # the router's router_endpoint_kv_tokens for it (0: unknown)

    @property
    def waiting(self) -> float:
        return self.waiting_capacity + self.waiting_deferred


@dataclass(frozen=True)
class Scrape:
    """Every target's exposition at ``t_s`` (the router's values whole, for all targets)."""

    t_s: float
    inflight: float
    queued: float
    received: float
    ready: float
    queued_tokens: float
    replicas: Mapping[str, Replica] = field(default_factory=dict)
    after_restart: bool = False  # Prometheus was down since the previous scrape


def sim_scrapes(history: Sequence[Scrape], routers: int, down: Sequence[S.RouterDown]) -> S.Scrapes:
    """The simulator's record of ``history`` (what ``inflight.sim.core`` records each scrape)."""
    out = S.Scrapes(routers, tuple(down))
    for s in history:
        reps = list(s.replicas.values())
        known = [r.endpoint_kv_tokens for r in reps if r.endpoint_kv_tokens > 0]
        nan = math.nan
        out.scrape(
            s.t_s,
            {
                S.INFLIGHT: s.inflight,
                S.QUEUED: s.queued,
                S.RECEIVED: s.received,
                S.READY: s.ready,
                S.VLLM_WAITING: sum(r.waiting for r in reps) if reps else nan,
                S.VLLM_RUNNING: sum(r.running for r in reps) if reps else nan,
                S.KV_USAGE: sum(r.usage for r in reps) if reps else nan,
                S.KV_WAITING: sum(r.waiting_capacity for r in reps) if reps else nan,
                S.KV_CACHE_TOKENS: (
                    float(max(r.cache_blocks * r.block_size for r in reps)) if reps else nan
                ),
                S.TOK_INFLIGHT: sum(r.endpoint_tokens for r in reps) if reps else nan,
                S.TOK_QUEUED: s.queued_tokens,
                S.TOK_CAPACITY: sum(known) / len(known) if known else nan,
            },
        )
    return out


def _labels(name: str, **labels: str) -> Labels:
    return tuple(sorted({"__name__": name, **labels}.items()))


def _router_series(s: Scrape, share: float, instance: str) -> Iterator[tuple[Labels, float]]:
    """A router target's series at ``s``: its ``share`` of L, the queue, the counter and the
    token demand; the endpoint states and capacities whole (every router sees them)."""
    base = {"job": ROUTER_JOB, "instance": instance}
    yield _labels(names.ROUTER_INFLIGHT, **base), s.inflight * share
    yield _labels(names.ROUTER_QUEUED, **base), s.queued * share
    yield _labels(names.ROUTER_REQUESTS_RECEIVED, **base), s.received * share
    yield _labels(names.ROUTER_ENDPOINTS, state="ready", **base), s.ready
    starting = float(len(s.replicas)) - s.ready
    yield _labels(names.ROUTER_ENDPOINTS, state="unhealthy", **base), starting
    yield _labels(names.ROUTER_QUEUED_TOKENS, **base), s.queued_tokens * share
    for name, rep in s.replicas.items():
        yield (
            _labels(names.ROUTER_ENDPOINT_INFLIGHT_TOKENS, endpoint=name, **base),
            rep.endpoint_tokens * share,
        )
        yield (
            _labels(names.ROUTER_ENDPOINT_KV_TOKENS, endpoint=name, **base),
            rep.endpoint_kv_tokens,
        )


def _replica_series(name: str, rep: Replica) -> Iterator[tuple[Labels, float]]:
    base = {"job": VLLM_JOB, "instance": name, names.VLLM_MODEL_LABEL: MODEL, "engine": "0"}
    yield _labels(names.VLLM_KV_CACHE_USAGE, **base), rep.usage
    yield _labels(names.VLLM_RUNNING, **base), rep.running
    yield _labels(names.VLLM_WAITING, **base), rep.waiting
    for reason, value in (("capacity", rep.waiting_capacity), ("deferred", rep.waiting_deferred)):
        yield _labels(names.VLLM_WAITING_BY_REASON, reason=reason, **base), value
    cache = {
        names.VLLM_CACHE_NUM_BLOCKS_LABEL: str(rep.cache_blocks),
        names.VLLM_CACHE_BLOCK_SIZE_LABEL: str(rep.block_size),
    }
    yield _labels(names.VLLM_CACHE_CONFIG_INFO, **cache, **base), 1.0


def stored_series(
    history: Sequence[Scrape], routers: int, down: Sequence[S.RouterDown]
) -> dict[Labels, list[Stored]]:
    """What Prometheus' scrape loop stores from ``history`` (see the module docstring)."""
    out: dict[Labels, list[Stored]] = {}
    previous: dict[str, set[Labels]] = {}  # target -> the series its last scrape exposed
    for s in history:
        t_ms = round(s.t_s * 1000)
        if s.after_restart:
            previous = {}  # a restarted Prometheus has no scrape cache: no markers
        exposed: dict[str, list[tuple[Labels, float]]] = {}
        for r in range(routers):
            instance = f"router-{r}"
            up = not any(d.covers(r, s.t_s) for d in down)
            series = list(_router_series(s, 1.0 / routers, instance)) if up else []
            exposed[instance] = series
            out.setdefault(
                _labels(names.PROMETHEUS_UP, job=ROUTER_JOB, instance=instance), []
            ).append((t_ms, 1.0 if up else 0.0))
        for name, rep in s.replicas.items():
            exposed[name] = [
                *_replica_series(name, rep),
                (_labels(names.PROMETHEUS_UP, job=VLLM_JOB, instance=name), 1.0),
            ]
        for series in exposed.values():
            for labels, value in series:
                out.setdefault(labels, []).append((t_ms, value))
        for target, before in previous.items():
            now = {labels for labels, _ in exposed.get(target, [])}
            for labels in sorted(before - now):
                out[labels].append((t_ms, None))
        previous = {target: {labels for labels, _ in series} for target, series in exposed.items()}
    return out


def openmetrics(series: Mapping[Labels, Sequence[Stored]]) -> str:
    """``series`` as OpenMetrics text for promtool (each family's series together, samples
    in time order); ValueError for a staleness marker, which the text cannot carry."""
    lines: list[str] = []
    typed: set[str] = set()
    for labels in sorted(series, key=lambda k: (dict(k)["__name__"], k)):
        name = dict(labels)["__name__"]
        family = name.removesuffix("_total")
        if family not in typed:
            kind = "counter" if name.endswith("_total") else "gauge"
            lines.append(f"# TYPE {family} {kind}")
            typed.add(family)
        rendered = ",".join(f'{k}="{v}"' for k, v in labels if k != "__name__")
        for t_ms, value in series[labels]:
            if value is None:
                raise ValueError(f"{name}{{{rendered}}} has a staleness marker at {t_ms} ms")
            lines.append(f"{name}{{{rendered}}} {value!r} {t_ms / 1000:.3f}")
    return "\n".join([*lines, "# EOF"]) + "\n"


def remote_write(base_url: str, series: Mapping[Labels, Sequence[Stored]]) -> None:
    """POST ``series`` to ``base_url``'s ``/api/v1/write`` (Prometheus started with
    ``--web.enable-remote-write-receiver``); raises on any answer but 2xx."""
    body = b"".join(_field(1, _time_series(labels, samples)) for labels, samples in series.items())
    request = urllib.request.Request(
        f"{base_url}/api/v1/write",
        data=_snappy_literal(body),
        method="POST",
        headers={
            "Content-Encoding": "snappy",
            "Content-Type": "application/x-protobuf",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        if resp.status // 100 != 2:
            raise RuntimeError(f"remote write answered HTTP {resp.status}: {resp.read()[:300]!r}")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _time_series(labels: Labels, samples: Sequence[Stored]) -> bytes:
    """``prometheus.TimeSeries``: labels = 1 (Label: name = 1, value = 2), samples = 2
    (Sample: value = 1, double; timestamp = 2, int64 ms)."""
    out = b"".join(_field(1, _field(1, k.encode()) + _field(2, v.encode())) for k, v in labels)
    for t_ms, value in samples:
        bits = STALE_NAN_BITS if value is None else struct.unpack("<Q", struct.pack("<d", value))[0]
        sample = _varint(1 << 3 | 1) + struct.pack("<Q", bits) + _varint(2 << 3 | 0) + _varint(t_ms)
        out += _field(2, sample)
    return out


def _snappy_literal(data: bytes) -> bytes:
    """``data`` in snappy's block format as literals only (valid, uncompressed)."""
    out = bytearray(_varint(len(data)))
    for i in range(0, len(data), 65536):
        chunk = data[i : i + 65536]
        n = len(chunk) - 1
        if n < 60:
            out.append(n << 2)
        elif n < 256:
            out += bytes([60 << 2, n])
        else:
            out += bytes([61 << 2]) + struct.pack("<H", n)
        out += chunk
    return bytes(out)
