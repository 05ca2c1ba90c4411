"""The pure replica lifecycle (inflight.control.lifecycle): every transition, the scale-down
order and the crash back-off, stepped in made-up time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inflight.control.lifecycle import (
    ACTIVE_PHASES,
    LIVE_PHASES,
    Backoff,
    Draining,
    Failed,
    Kill,
    LifecycleConfig,
    ProbeKind,
    Probes,
    Publish,
    Ready,
    Remove,
    ReplicaPhase,
    ReplicaState,
    Reported,
    Terminate,
    cancel,
    count,
    crashed,
    drain,
    needed,
    new_replica,
    reconcile,
    scale_plan,
    settle,
    step,
)
from inflight.control.scale_down import Warmth

CFG = LifecycleConfig(
    health_interval_s=1.0,
    unhealthy_after=3,
    startup_timeout_s=100.0,
    drain_timeout_s=30.0,
    grace_s=5.0,
    backoff_base_s=0.5,
    backoff_max_s=30.0,
    stable_s=10.0,
)
S, R, D, X, G = (
    ReplicaPhase.STARTING,
    ReplicaPhase.READY,
    ReplicaPhase.DRAINING,
    ReplicaPhase.STOPPING,
    ReplicaPhase.GONE,
)
UP = Probes(alive=True, healthy=True, listening=frozenset({8001}))


def starting(rid=1, port=8001, at=0.0):
    return new_replica(rid, port, at)


def ready(rid=1, port=8001, started=0.0, at=5.0):
    up = Probes(alive=True, healthy=True, listening=frozenset({port}))
    state, _ = step(starting(rid, port, started), up, at, CFG)
    assert state.phase is R
    return state


def kinds(actions):
    return [type(a).__name__ for a in actions]


# --- STARTING -----------------------------------------------------------------------------------
def test_starting_becomes_ready_on_health_and_its_port_listening():
    s, acts = step(starting(), Probes(alive=True, healthy=False), 3.0, CFG)
    assert s.phase is S and acts == ()
    s, acts = step(s, UP, 4.0, CFG)
    assert s.phase is R and s.ready_at_s == 4.0 and s.next_health_s == 5.0
    assert acts == (Ready(1, 4.0), Publish())


def test_starting_without_a_listening_probe_trusts_health():
    """The simulator's virtual replica: healthy once start-up has passed, no /proc."""
    s, _ = step(starting(), Probes(alive=True, healthy=True), 4.0, CFG)
    assert s.phase is R


def test_starting_times_out():
    s, acts = step(starting(), Probes(alive=True, healthy=False), 100.0, CFG)
    assert s.phase is S, "the timeout is strictly after startup_timeout_s"
    s, acts = step(s, Probes(alive=True, healthy=False), 100.5, CFG)
    assert s.phase is X and s.crashed and s.deadline_s == 105.5
    assert acts == (Failed(1, "start-up timeout"), Terminate(1, "failed"))


def test_starting_exit_fails_without_publishing():
    s, acts = step(starting(), Probes(alive=False), 1.0, CFG)
    assert s.phase is X and s.crashed
    assert acts == (Failed(1, "exited"), Terminate(1, "failed"))


def test_starting_port_taken_by_another_process_fails():
    probes = Probes(alive=True, healthy=True, listening=frozenset({9999}))
    s, acts = step(starting(port=8001), probes, 2.0, CFG)
    assert s.phase is X and s.crashed
    (failed, term) = acts
    assert isinstance(failed, Failed) and failed.why.startswith("port taken")
    assert "8001" in failed.why and "9999" in failed.why
    assert term == Terminate(1, "failed")


def test_a_reporting_replica_joins_on_the_port_it_reports():
    s = starting(port=0)
    assert ProbeKind.REPORT in needed(s, 0.0, CFG)
    s, acts = step(s, Probes(alive=True), 1.0, CFG)  # no report yet
    assert s.port == 0 and acts == ()
    probes = Probes(alive=True, reported_port=8123, healthy=True, listening=frozenset({8123}))
    s, acts = step(s, probes, 2.0, CFG)
    assert s.phase is R and s.port == 8123
    assert acts == (Reported(1, 8123), Ready(1, 2.0), Publish())
    assert ProbeKind.REPORT not in needed(s, 3.0, CFG)


def test_a_reporting_replica_that_reports_then_stays_unhealthy_keeps_its_port():
    s, acts = step(starting(port=0), Probes(alive=True, reported_port=8123), 1.0, CFG)
    assert s.phase is S and s.port == 8123 and acts == (Reported(1, 8123),)
    assert ProbeKind.REPORT not in needed(s, 1.5, CFG)


def test_a_bad_ready_file_fails_the_replica():
    s, acts = step(starting(port=0), Probes(alive=True, report_error="not JSON"), 1.0, CFG)
    assert s.phase is X and acts[0] == Failed(1, "not JSON")


def test_no_port_reported_before_the_timeout_fails():
    s, acts = step(starting(port=0), Probes(alive=True), 101.0, CFG)
    assert s.phase is X
    assert acts[0] == Failed(1, "no port reported before the start-up timeout")


# --- READY --------------------------------------------------------------------------------------
def test_ready_is_health_checked_only_every_interval():
    s = ready(at=5.0)  # next check at 6.0
    assert needed(s, 5.5, CFG) == {ProbeKind.ALIVE}
    assert needed(s, 6.0, CFG) == {ProbeKind.ALIVE, ProbeKind.HEALTH}
    same, acts = step(s, Probes(alive=True, healthy=False), 5.5, CFG)
    assert same == s and acts == (), "a check before its time counts for nothing"


def test_health_failures_in_a_row_fail_a_ready_replica():
    s = ready(at=5.0)
    bad = Probes(alive=True, healthy=False)
    s, acts = step(s, bad, 6.0, CFG)
    s, acts = step(s, bad, 7.0, CFG)
    assert s.phase is R and s.health_failures == 2 and acts == ()
    s, acts = step(s, bad, 8.0, CFG)
    assert s.phase is X and s.crashed
    assert acts == (Failed(1, "3 failed health checks"), Publish(), Terminate(1, "failed"))


def test_a_good_check_resets_the_failure_count():
    s = ready(at=5.0)
    s, _ = step(s, Probes(alive=True, healthy=False), 6.0, CFG)
    s, _ = step(s, Probes(alive=True, healthy=False), 7.0, CFG)
    s, _ = step(s, Probes(alive=True, healthy=True), 8.0, CFG)
    assert s.health_failures == 0 and s.next_health_s == 9.0
    s, _ = step(s, Probes(alive=True, healthy=False), 9.0, CFG)
    assert s.phase is R and s.health_failures == 1


def test_ready_exit_leaves_the_endpoint_file_before_the_signal():
    s, acts = step(ready(), Probes(alive=False), 6.0, CFG)
    assert s.phase is X and s.deadline_s == 11.0
    assert acts == (Failed(1, "exited"), Publish(), Terminate(1, "failed"))


# --- DRAINING, STOPPING -------------------------------------------------------------------------
def test_drain_stops_once_drained():
    s, acts = drain(ready(), 10.0, CFG)
    assert s.phase is D and s.deadline_s == 40.0 and acts == (Draining(1), Publish())
    assert needed(s, 11.0, CFG) == {ProbeKind.ALIVE, ProbeKind.DRAINED}
    s, acts = step(s, Probes(alive=True, drained=False), 11.0, CFG)
    assert s.phase is D and acts == ()
    s, acts = step(s, Probes(alive=True, drained=True), 12.0, CFG)
    assert s.phase is X and not s.crashed and s.deadline_s == 17.0
    assert acts == (Terminate(1, "drained"),)


def test_drain_stops_at_its_deadline_even_if_not_drained():
    s, _ = drain(ready(), 10.0, CFG)
    assert ProbeKind.DRAINED not in needed(s, 40.0, CFG)
    s, acts = step(s, Probes(alive=True), 40.0, CFG)
    assert s.phase is X and acts == (Terminate(1, "drain timeout"),)


def test_a_replica_that_exits_while_draining_is_not_a_crash():
    s, _ = drain(ready(), 10.0, CFG)
    s, acts = step(s, Probes(alive=False, drained=False), 11.0, CFG)
    assert s.phase is X and not s.crashed
    assert acts == (Terminate(1, "exited while draining"),)


def test_stopping_is_killed_after_grace_once_then_gone_when_its_group_is():
    s, _ = cancel(starting(), 1.0, CFG)  # deadline 6.0
    assert needed(s, 2.0, CFG) == {ProbeKind.GROUP_ALIVE}
    s, acts = step(s, Probes(group_alive=True), 5.9, CFG)
    assert acts == ()
    s, acts = step(s, Probes(group_alive=True), 6.0, CFG)
    assert s.killed and acts == (Kill(1),)
    s, acts = step(s, Probes(group_alive=True), 7.0, CFG)
    assert acts == (), "SIGKILL is sent once"
    s, acts = step(s, Probes(group_alive=False), 8.0, CFG)
    assert s.phase is G and acts == (Remove(1),)
    assert needed(s, 9.0, CFG) == frozenset()


def test_a_dead_leader_with_a_live_worker_is_not_gone():
    s, _ = step(ready(), Probes(alive=False), 6.0, CFG)
    s, acts = step(s, Probes(alive=False, group_alive=True), 7.0, CFG)
    assert s.phase is X and acts == ()


def test_nothing_probed_changes_nothing_before_a_deadline():
    for s in (starting(), ready(), drain(ready(), 10.0, CFG)[0], cancel(starting(), 1.0, CFG)[0]):
        assert step(s, Probes(), 2.0 if s.phase is not D else 11.0, CFG) == (s, ())


# --- scale_plan ---------------------------------------------------------------------------------
def fleet():
    """Two ready (1, 2), two starting (3, 4), one draining (5)."""
    return [
        ready(1, 8001, 0.0, 5.0),
        ready(2, 8002, 1.0, 6.0),
        starting(3, 8003, 7.0),
        starting(4, 8004, 8.0),
        drain(ready(5, 8005, 0.5, 5.0), 9.0, CFG)[0],
    ]


def test_scale_down_cancels_starting_newest_first_then_drains_ready_newest_first():
    replicas = fleet()
    assert scale_plan(replicas, 3, 10.0, 0.0).cancel == (4,)
    assert scale_plan(replicas, 2, 10.0, 0.0) == scale_plan(replicas, 2, 10.0, 99.0)
    plan = scale_plan(replicas, 1, 10.0, 0.0)
    assert (plan.cancel, plan.drain, plan.start) == ((4, 3), (2,), 0)
    plan = scale_plan(replicas, 0, 10.0, 0.0)
    assert (plan.cancel, plan.drain) == ((4, 3), (2, 1))


def test_scale_down_drains_the_ready_replica_whose_loss_costs_least():
    """With warmth (the router's figures), the ready replica with fewer requests in flight
    leaves, then the one with less cache only it holds; newest first only among equals."""
    replicas = fleet()
    # 2 is newest, but busier: 1 leaves.
    assert scale_plan(replicas, 1, 10.0, 0.0, {1: Warmth(0, 9), 2: Warmth(1, 0)}).drain == (1,)
    # Equally busy: the one with less unique cache leaves.
    assert scale_plan(replicas, 1, 10.0, 0.0, {1: Warmth(2, 3), 2: Warmth(2, 40)}).drain == (1,)
    # Equal (or unknown: cold): newest first, as without warmth.
    assert scale_plan(replicas, 1, 10.0, 0.0, {1: Warmth(1, 1), 2: Warmth(1, 1)}).drain == (2,)
    assert scale_plan(replicas, 1, 10.0, 0.0, {}).drain == (2,)
    # Starting replicas are still cancelled first, whatever the ready ones' warmth.
    plan = scale_plan(replicas, 1, 10.0, 0.0, {1: Warmth(0, 0), 2: Warmth(5, 5)})
    assert (plan.cancel, plan.drain) == ((4, 3), (1,))


def test_reconcile_passes_warmth_to_the_scale_plan():
    replicas = [ready(1, 8001, 0.0, 5.0), ready(2, 8002, 1.0, 6.0)]
    out = reconcile(replicas, {}, Backoff(), 1, 10.0, CFG, {2: Warmth(1, 0)})
    assert [(r.id, r.phase) for r in out.replicas] == [(1, D), (2, R)]


def test_scale_up_waits_for_the_backoff():
    replicas = fleet()  # 4 active; the draining one does not count
    assert scale_plan(replicas, 4, 10.0, 0.0).start == 0
    assert scale_plan(replicas, 6, 10.0, 0.0).start == 2
    assert scale_plan(replicas, 6, 10.0, 10.5).start == 0
    assert scale_plan(replicas, 6, 10.5, 10.5).start == 2


def test_scale_plan_refuses_a_negative_desired():
    with pytest.raises(ValueError, match="desired replicas must be >= 0"):
        scale_plan([], -1, 0.0, 0.0)


def test_counts():
    replicas = fleet()
    assert count(replicas, ACTIVE_PHASES) == 4
    assert count(replicas, LIVE_PHASES) == 5


# --- back-off -----------------------------------------------------------------------------------
def test_backoff_doubles_up_to_its_maximum():
    b = Backoff()
    delays = []
    for _ in range(9):
        b = crashed(b, 100.0, CFG)
        delays.append(b.restart_not_before_s - 100.0)
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert b.crashes == 9


def test_backoff_resets_after_a_replica_is_ready_for_stable_s():
    b = crashed(crashed(Backoff(), 0.0, CFG), 0.0, CFG)
    r = ready(at=5.0)
    assert settle(b, [r], 14.9, CFG) == b
    assert settle(b, [r], 15.0, CFG).crashes == 0
    assert settle(b, [starting()], 1000.0, CFG) == b, "only a READY replica proves stability"
    b = crashed(settle(b, [r], 15.0, CFG), 16.0, CFG)
    assert b.restart_not_before_s == 16.5, "after a reset the delay starts from the base"


def test_a_replica_ready_since_before_the_crash_does_not_reset_the_backoff():
    """A crash loop beside a healthy old replica still backs off."""
    old = ready(1, 8001, 0.0, 5.0)
    b = crashed(crashed(Backoff(), 100.0, CFG), 101.0, CFG)
    assert settle(b, [old], 500.0, CFG) == b
    new = ready(2, 8002, 101.0, 101.0)
    assert settle(b, [old, new], 110.9, CFG) == b
    assert settle(b, [old, new], 111.0, CFG).crashes == 0


# --- reconcile: the fleet in one tick -----------------------------------------------------------
def test_reconcile_starts_what_is_missing():
    out = reconcile([], {}, Backoff(), 2, 0.0, CFG)
    assert out.start == 2 and out.replicas == () and out.actions == ()


def test_reconcile_counts_a_failure_as_a_crash_and_backs_off_the_replacement():
    r = ready(1)
    out = reconcile([r], {1: Probes(alive=False)}, Backoff(), 1, 6.0, CFG)
    assert out.start == 0, "the replacement waits for the back-off"
    assert out.backoff == Backoff(1, 6.5, last_crash_s=6.0)
    assert out.actions[0] == Failed(1, "exited", crashes=1, delay_s=0.5)
    (stopping,) = out.replicas
    # Next tick: the group is gone; still within the back-off.
    out = reconcile(out.replicas, {1: Probes(group_alive=False)}, out.backoff, 1, 6.2, CFG)
    assert out.replicas == () and out.actions == (Remove(1),) and out.start == 0
    out = reconcile(out.replicas, {}, out.backoff, 1, 6.5, CFG)
    assert out.start == 1
    assert stopping.phase is X


def test_reconcile_two_failures_in_one_tick_are_two_crashes():
    replicas = [ready(1), ready(2, 8002)]
    dead = Probes(alive=False)
    out = reconcile(replicas, {1: dead, 2: dead}, Backoff(), 2, 6.0, CFG)
    fails = [a for a in out.actions if isinstance(a, Failed)]
    assert [(f.crashes, f.delay_s) for f in fails] == [(1, 0.5), (2, 1.0)]
    assert out.backoff == Backoff(2, 7.0, last_crash_s=6.0)


def test_reconcile_scales_down_after_stepping():
    replicas = fleet()
    out = reconcile(replicas, {5: Probes(alive=True, drained=True)}, Backoff(), 1, 10.0, CFG)
    phases = {r.id: r.phase for r in out.replicas}
    assert phases == {1: R, 2: D, 3: X, 4: X, 5: X}
    assert out.actions[0] == Terminate(5, "drained"), "the step's actions come first"
    assert sorted(kinds(out.actions[1:])) == ["Draining", "Publish", "Terminate", "Terminate"]
    assert Draining(2) in out.actions
    assert Terminate(4, "cancelled") in out.actions and Terminate(3, "cancelled") in out.actions


def test_reconcile_resets_crashes_when_stable():
    out = reconcile([ready(at=5.0)], {}, Backoff(3, 0.0, last_crash_s=4.0), 1, 15.0, CFG)
    assert out.backoff.crashes == 0


def test_reconcile_is_pure():
    replicas = fleet()
    before = list(replicas)
    args = (replicas, {1: Probes(alive=False)}, Backoff(), 2, 10.0, CFG)
    assert reconcile(*args) == reconcile(*args)
    assert replicas == before


# --- the config ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field",
    ["health_interval_s", "startup_timeout_s", "drain_timeout_s", "backoff_base_s"],
)
def test_config_refuses_non_positive_times(field):
    with pytest.raises(ValueError, match=field):
        LifecycleConfig(**{field: 0})


def test_config_refuses_bad_counts():
    with pytest.raises(ValueError, match="unhealthy_after"):
        LifecycleConfig(unhealthy_after=0)
    with pytest.raises(ValueError, match="stable_s"):
        LifecycleConfig(stable_s=-1)


def test_state_is_frozen():
    s = starting()
    with pytest.raises(AttributeError):
        s.phase = R
    assert replace(s, port=1) != s
    assert isinstance(s, ReplicaState)


# --- a virtual fleet, driven as the simulator drives it -----------------------------------------
def test_a_virtual_fleet_scales_up_and_down_in_virtual_time():
    """Start-up 100 s, ticks of 1 s: 3 wanted at 0 are ready at 100; down to 1 at 200 drains
    the two newest, which stop once the (virtual) router holds nothing on them."""
    startup_s, holding = 100.0, {2: 210.0, 3: 205.0}  # the router lets go at these times
    replicas: tuple[ReplicaState, ...] = ()
    backoff, next_id, terminated = Backoff(), 1, set()
    ready_at, gone_at, live = {}, {}, []

    def probe(r, now):
        return Probes(
            alive=True,
            group_alive=r.id not in terminated,
            healthy=now - r.started_at_s >= startup_s,
            drained=now >= holding.get(r.id, 0.0),
        )

    for t in range(0, 301):
        now = float(t)
        desired = 3 if now < 200 else 1
        probes = {r.id: probe(r, now) for r in replicas if needed(r, now, CFG)}
        out = reconcile(replicas, probes, backoff, desired, now, CFG)
        for a in out.actions:
            if isinstance(a, Terminate):
                terminated.add(a.replica_id)
            elif isinstance(a, Ready):
                ready_at[a.replica_id] = now
            elif isinstance(a, Remove):
                gone_at[a.replica_id] = now
        replicas, backoff = out.replicas, out.backoff
        for _ in range(out.start):
            replicas += (new_replica(next_id, 8000 + next_id, now),)
            next_id += 1
        live.append(count(replicas, LIVE_PHASES))
    assert ready_at == {1: 100.0, 2: 100.0, 3: 100.0}
    assert gone_at == {3: 206.0, 2: 211.0}, "drained, then gone at the next tick"
    assert [r.id for r in replicas] == [1] and backoff == Backoff()
    assert next_id == 4, "no replica was started beyond the three"
    assert (live[199], live[205], live[206], live[210], live[211]) == (3, 3, 2, 2, 1)
