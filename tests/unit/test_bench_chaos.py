"""The fault run's accounting, from recorded data: attribution, scale-downs, the bar, the report."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from inflight.bench.chaos.model import (
    ChaosRequest,
    FaultWindow,
    Sample,
    bar_failures,
    count_requests,
    endpoint_in_error,
    fault_report,
    scale_downs,
    streams_across,
)
from inflight.bench.chaos.probe import parse_queue
from inflight.bench.chaos.report import chaos_json, chaos_markdown
from inflight.bench.chaos.run import parse_faults
from inflight.cli import build_parser

DEAD = "127.0.0.1:41235"
ALIVE = "127.0.0.1:41236"


def req(start, end, ok=True, router=0, error="", long=False):
    return ChaosRequest(start, end, ok, router, error, long)


def window(**kw):
    base = dict(fault="kill-replica", start_t=100.0, injected_t=110.0, released_t=110.0,
                recovered_t=114.0, end_t=130.0, faulted_endpoints=(DEAD,))  # fmt: skip
    return FaultWindow(**{**base, **kw})


@pytest.mark.parametrize(
    ("error", "endpoint"),
    [
        (
            f'stream ended without [DONE]: data: {{"error": {{"message": "upstream {DEAD} '
            'failed mid-response", "type": "upstream_broken"}}',
            DEAD,
        ),
        (f"HTTP 502: upstream {ALIVE} refused; retried once", ALIVE),
        ("TimeoutError: ", None),
        ("HTTP 503: no ready endpoint", None),
    ],
)
def test_the_endpoint_named_in_a_router_error_is_found(error, endpoint):
    assert endpoint_in_error(error) == endpoint


def test_failures_are_split_by_the_endpoint_their_error_names():
    requests = [
        req(101, 105),
        req(108, 111, False, error=f"stream ended without [DONE]: upstream {DEAD} failed"),
        req(109, 111, False, error=f"HTTP 502: upstream {ALIVE} reset; retried once"),
        req(112, 140, False, error="TimeoutError: "),  # unattributable: never excused
        req(99, 101, False, error=f"upstream {DEAD} failed"),  # before the window
        req(130, 131, False, error=f"upstream {DEAD} failed"),  # the next window's
    ]
    counts = count_requests(requests, window())
    assert (counts.sent, counts.failed, counts.on_faulted, counts.lost_other) == (4, 3, 1, 2)


def test_requests_in_flight_through_a_killed_router_count_as_on_the_fault():
    w = window(fault="second-router", faulted_endpoints=(), faulted_router=1)
    requests = [
        req(108, 111, False, router=1, error="ClientPayloadError: "),  # in flight at the kill
        req(111, 112, False, router=1, error="ClientConnectorError: "),  # sent after it
        req(108, 111, False, router=0, error="ClientPayloadError: "),  # the other router
    ]
    counts = count_requests(requests, w)
    assert (counts.on_faulted, counts.lost_other) == (1, 2)


def test_a_request_a_killed_router_cut_before_its_death_was_seen_counts_on_the_fault():
    # Killed at 110.0 (the signal), seen dead at 110.2 (injected_t): its clients saw the
    # reset in between, as in a fault run at 9cd1138 (9 requests lost "otherwise").
    w = window(fault="router-restart", faulted_endpoints=(), faulted_router=0,
               injected_t=110.2, released_t=110.2, signalled_t=110.0)  # fmt: skip
    requests = [
        req(109, 110.1, False, router=0, error="ClientOSError: reset"),  # cut by the kill
        req(109, 109.9, False, router=0, error="ClientOSError: reset"),  # before the signal
        req(110.3, 111, False, router=0, error="ClientConnectorError: "),  # after the death
    ]
    counts = count_requests(requests, w)
    assert (counts.on_faulted, counts.lost_other) == (1, 2)
    # Without the signal's time, the death is the instant: the first is lost otherwise.
    counts = count_requests(requests, window(**{**w.__dict__, "signalled_t": None}))
    assert (counts.on_faulted, counts.lost_other) == (0, 3)


def point(t, desired, ready=None):
    return SimpleNamespace(t=t, desired=desired, ready=desired if ready is None else ready)


def test_a_scale_down_at_saturation_one_is_wrong_by_the_decision():
    timeline = [point(1, 3), point(5, 3), point(10, 2)]
    decisions = [
        {"t": 9.9, "L": 12, "capacity": 12, "saturation": 1.0, "desired": 2},
        {"t": 4.9, "L": 2, "capacity": 12, "saturation": 0.17, "desired": 3},
    ]
    (down,) = scale_downs(timeline, decisions, [])
    assert (down.before, down.after, down.wrong) == (3, 2, True)


def test_a_scale_down_is_wrong_when_every_router_together_is_saturated():
    """The stack's decision saw one router's L (6 of 12); the routers together held 13."""
    timeline = [point(1, 3), point(10, 2)]
    decisions = [{"t": 9.95, "L": 6, "capacity": 12, "saturation": 0.5, "desired": 2}]
    samples = [Sample(9.0, 4, 3, 4), Sample(9.8, 13, 3, 4), Sample(10.5, 2, 2, 4)]
    (down,) = scale_downs(timeline, decisions, samples)
    assert down.wrong and down.saturation == pytest.approx(13 / 12)
    assert "routers L=13" in down.evidence


def test_a_scale_down_below_saturation_one_is_right_and_rises_are_ignored():
    timeline = [point(1, 1), point(2, 3), point(10, 2), point(11, 2)]
    decisions = [{"t": 9.95, "L": 3, "capacity": 12, "saturation": 0.25, "desired": 2}]
    samples = [Sample(9.9, 3, 3, 4)]
    downs = scale_downs(timeline, decisions, samples)
    assert [(d.t, d.wrong) for d in downs] == [(10, False)]


def test_a_decision_of_another_count_or_too_old_is_not_evidence_and_no_evidence_is_wrong():
    """A scale-down nobody can show was safe counts against the stack (it was excused)."""
    timeline = [point(1, 3), point(10, 2)]
    decisions = [
        {"t": 5.0, "L": 2, "capacity": 12, "saturation": 0.17, "desired": 2},  # 5 s before
        {"t": 9.95, "L": 2, "capacity": 12, "saturation": 0.17, "desired": 3},  # not this one
    ]
    (down,) = scale_downs(timeline, decisions, [])
    assert down.saturation is None and down.evidence == "no evidence"
    assert down.wrong
    report = fault_report(window(start_t=0.0), [], [down])
    assert report.wrong_scale_downs == 1
    assert "kill-replica: wrong_scale_downs = 1 (must be 0)" in bar_failures([report])


def test_a_router_sample_from_before_the_routers_went_quiet_is_no_evidence():
    """The stack's router dead for 5 s: its last sample, from before, says nothing of the
    moment the count fell."""
    timeline = [point(1, 3), point(10, 2)]
    (stale,) = scale_downs(timeline, [], [Sample(5.0, 1, 3, 4)])
    assert stale.saturation is None and stale.wrong
    (fresh,) = scale_downs(timeline, [], [Sample(5.0, 1, 3, 4), Sample(9.0, 1, 3, 4)])
    assert fresh.saturation == pytest.approx(1 / 12) and not fresh.wrong


def test_streams_open_across_a_scale_down_are_counted_and_checked():
    (down,) = scale_downs([point(1, 3), point(50, 1)], [], [])
    requests = [
        req(40, 70, True, long=True),
        req(45, 80, False, error="ClientPayloadError", long=True),
        req(40, 49, True, long=True),  # ended before it
        req(40, 70, True),  # not a long stream
    ]
    assert streams_across(requests, [down]) == (2, 1)


def test_the_report_row_and_the_bar():
    requests = [
        req(101, 105),
        req(108, 111, False, error=f"upstream {DEAD} failed mid-response"),
        req(112, 113, False, error="HTTP 503: queue full"),
    ]
    w = window(leaked_slots=2, leaked_detail={"router-0 L": 2}, orphans=("killed replica",))
    downs = scale_downs([point(100, 3), point(120, 2)], [], [Sample(119.0, 12, 3, 4)])
    report = fault_report(w, requests, downs)
    assert (report.requests_sent, report.requests_failed) == (3, 2)
    assert (report.failed_on_faulted_replica, report.lost_other) == (1, 1)
    assert (report.leaked_slots, report.wrong_scale_downs, report.orphans) == (2, 1, 1)
    assert report.time_to_recover_s == 4.0
    (lost,) = report.details["lost_other_errors"]
    assert lost == {"start_t": 112, "end_t": 113, "router": 0, "error": "HTTP 503: queue full"}
    failures = bar_failures([report], ["pid 4242"])
    assert failures == [
        "kill-replica: lost_other = 1 (must be 0)",
        "kill-replica: leaked_slots = 2 (must be 0)",
        "kill-replica: wrong_scale_downs = 1 (must be 0)",
        "kill-replica: orphans = 1 (must be 0)",
        "after stopping the stack: processes left ['pid 4242']",
    ]
    doc = chaos_json([report], failures, {"created_at": "now", "command": ["inflight"]})
    assert doc["bar"]["passed"] is False
    md = chaos_markdown(doc)
    assert "| kill-replica | 3 | 2 | 1 | 1 | 2 | 1 | 4.0 | 1 |" in md
    assert "**Bar: MISSED**" in md and "- kill-replica: lost_other = 1 (must be 0)" in md
    assert "lost (router 0): HTTP 503: queue full" in md


def test_a_clean_fault_meets_the_bar_and_an_unrecovered_one_does_not():
    clean = fault_report(window(), [req(101, 105)], [])
    assert bar_failures([clean]) == []
    stuck = fault_report(window(recovered_t=None), [req(101, 105)], [])
    assert stuck.time_to_recover_s is None
    assert bar_failures([stuck]) == ["kill-replica: did not recover before the deadline"]
    assert "| — |" in chaos_markdown(chaos_json([stuck], ["x"], {}))


def test_a_scale_down_fault_needs_a_stream_open_at_a_scale_down():
    w = window(fault="scale-down", faulted_endpoints=())
    none_open = fault_report(w, [req(101, 105, long=True)], [])
    assert "scale-down: no long stream was open when the replica count fell" in bar_failures(
        [none_open]
    )
    downs = scale_downs([point(100, 3), point(120, 1)], [], [Sample(119.5, 4, 3, 4)])
    broken = fault_report(w, [req(101, 125, False, error="x", long=True)], downs)
    assert bar_failures([broken]) == [
        "kill-replica: lost_other = 1 (must be 0)".replace("kill-replica", "scale-down"),
        "scale-down: 1 of 1 streams open at it did not complete",
    ]
    fine = fault_report(w, [req(101, 125, long=True)], downs)
    assert bar_failures([fine]) == []


def test_replica_queue_is_running_plus_waiting():
    text = (
        "# HELP vllm:num_requests_running x\n"
        'vllm:num_requests_running{model_name="m"} 3.0\n'
        'vllm:num_requests_waiting{model_name="m"} 2.0\n'
        'vllm:num_requests_swapped{model_name="m"} 9.0\n'
    )
    assert parse_queue(text) == 5


def test_fault_lists_are_checked():
    assert parse_faults("kill-replica, scaler-restart") == ["kill-replica", "scaler-restart"]
    with pytest.raises(ValueError, match="--faults: unknown"):
        parse_faults("kill-replica,reboot")
    with pytest.raises(ValueError, match="listed twice"):
        parse_faults("kill-replica,kill-replica")


def test_the_subcommand_is_registered_with_seed_second_durations():
    args = build_parser().parse_args(["bench", "chaos", "--out-dir", "/tmp/x"])
    assert isinstance(args, argparse.Namespace)
    assert args.faults.split(",")[0] == "kill-replica" and args.prometheus_down_s == 120.0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "chaos", "--out-dir", "/tmp/x", "--rate", "0"])


def test_scaler_metadata_reaches_inflight_up_and_bad_keys_are_refused_naming_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from inflight.bench.chaos.run import metadata_args

    argv = ["bench", "chaos", "--out-dir", "/tmp/x"]
    args = build_parser().parse_args([*argv, "--scaler-metadata", "floorWindowSeconds=300"])
    assert args.scaler_metadata == (("floorWindowSeconds", "300"),)
    assert metadata_args(args.scaler_metadata) == ("--scaler-metadata", "floorWindowSeconds=300")
    assert metadata_args(build_parser().parse_args(argv).scaler_metadata) == ()
    for bad, says in (
        ("floorWindow=300", "unknown key 'floorWindow'"),
        ("slotsPerReplica=8", "use that flag"),
        ("floorWindowSeconds", "is not KEY=VALUE"),
    ):
        with pytest.raises(SystemExit):
            build_parser().parse_args([*argv, "--scaler-metadata", bad])
        err = capsys.readouterr().err
        assert "--scaler-metadata" in err and says in err, err


def test_a_leak_check_that_could_not_read_a_router_or_replica_fails_the_fault():
    """It used to count them as 0 leaked slots, and pass."""
    blind = window(unprobed=("router-0 /router/status", "replica 127.0.0.1:41236 /metrics"))
    report = fault_report(blind, [req(101, 105)], [])
    assert report.leaked_slots == 0
    assert bar_failures([report]) == [
        "kill-replica: the leak check could not read "
        "['router-0 /router/status', 'replica 127.0.0.1:41236 /metrics']"
    ]
    assert "not read by the leak check: router-0 /router/status" in chaos_markdown(
        chaos_json([report], [], {})
    )


def test_a_fault_injected_before_the_stack_settled_fails():
    """It used to add a note only."""
    report = fault_report(window(settled=False), [req(101, 105)], [])
    assert bar_failures([report]) == [
        "kill-replica: the stack had not settled when the fault was injected"
    ]


def test_requests_still_open_after_the_drain_fail_the_fault():
    """It used to add a note only."""
    report = fault_report(window(open_after_drain=3), [req(101, 105)], [])
    assert report.details["open_after_drain"] == 3
    assert bar_failures([report]) == ["kill-replica: 3 request(s) still open after the drain"]


@pytest.mark.parametrize(
    ("timeline", "failure"),
    [
        ([point(90, 2), point(115, 3), point(118, 4)], None),  # 2 -> 4 while stopped
        ([point(90, 2), point(115, 2)], "no scale-up while the fault lasted (desired 2 → 2)"),
        # after SIGCONT, in the window still: too late
        ([point(90, 2), point(125, 4)], "no scale-up while the fault lasted (desired 2 → 2)"),
        ([], "no scale-up while the fault lasted (desired None → None)"),
    ],
)
def test_a_surge_must_raise_the_replica_count_while_the_fault_lasts(timeline, failure):
    w = window(fault="router-stop", faulted_endpoints=(), surge=True, released_t=120.0)
    report = fault_report(w, [req(101, 105)], [], timeline)
    expected = [] if failure is None else [f"router-stop: {failure}"]
    assert bar_failures([report]) == expected


def test_requests_retried_after_a_refused_connection_are_counted():
    requests = [req(101, 105), ChaosRequest(111, 118, True, 0, "", False, refused=12)]
    report = fault_report(window(fault="router-restart", faulted_router=0), requests, [])
    assert report.details["requests_retried_after_refused"] == 1
    assert report.lost_other == 0
    md = chaos_markdown(chaos_json([report], [], {}))
    assert "1 request(s) refused at connect, retried" in md


def test_surge_faults_need_a_factor_above_the_base(tmp_path, capsys):
    from inflight.bench.chaos.run import main

    args = build_parser().parse_args(
        ["bench", "chaos", "--out-dir", str(tmp_path / "x"), "--faults", "router-stop",
         "--surge-base", "2", "--surge-factor", "2"]
    )  # fmt: skip
    assert main(args) == 2
    assert "--surge-factor (2) must be above --surge-base (2)" in capsys.readouterr().err


def _plan(desired_before=3, long_streams=4, slots=4, **overrides):
    from inflight.bench.chaos.scale_down import plan_for

    return plan_for(slots=slots, time_scale=0.2, min_replicas=1, max_replicas=4,
                    desired_before=desired_before, long_streams=long_streams,
                    overrides=overrides)  # fmt: skip


def test_the_scale_down_deadline_is_the_trigger_s_memory_and_the_hpa_s_periods():
    """The scale-down fault waits for the policy's own scale-down; its deadline is read from
    the trigger metadata `inflight up` sends and its HPA, not a constant: a longer floor
    window (the policy's memory) moves it by as much (× time-scale)."""
    shipped = _plan()
    # the shipped defaults: the recurrence's two 900 s floor windows + the 10 s scale-up
    # mean, 2 HPA syncs of 15 s, 3 scrapes of 5 s (1 s at least), all × 0.2
    assert shipped.deadline_s == pytest.approx((1800 + 10) * 0.2 + 2 * 15 * 0.2 + 3 * 1.0)
    assert shipped.streams == 4
    assert "memory 362 s" in shipped.why
    longer = _plan(floorWindowSeconds="1200")
    assert longer.deadline_s - shipped.deadline_s == pytest.approx(2 * 300 * 0.2)
    off = _plan(floorWindowSeconds="0", startupSeconds="0")
    assert off.deadline_s == pytest.approx((60 + 10) * 0.2 + 2 * 15 * 0.2 + 3 * 1.0)


def test_the_scale_down_streams_fit_in_one_replica_fewer_or_the_fault_cannot_run():
    """More streams than one replica fewer holds would keep the count where it is: the
    guaranteed fall needs L ≤ (desired − 1) × target."""
    assert _plan(desired_before=2, long_streams=8).streams == 4
    assert _plan(desired_before=4, long_streams=8).streams == 8
    assert _plan(desired_before=2, long_streams=8, targetSaturation="0.5").streams == 2
    with pytest.raises(ValueError, match="nothing to scale down from"):
        _plan(desired_before=1)


def test_the_ci_fault_list_includes_the_scale_down():
    from inflight.bench.chaos.defaults import CI_FAULTS, DEFAULT_FAULTS

    assert "scale-down" in parse_faults(CI_FAULTS)
    assert set(parse_faults(CI_FAULTS)) <= set(parse_faults(DEFAULT_FAULTS))
