"""ScaledObject metadata parsing and the strict selector grammar."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from external_scaler.errors import MetadataError
from external_scaler.metadata import KEDA_KEYS, ScalerSpec, parse_metadata
from external_scaler.selector import parse_selector
from inflight import names


def test_defaults_come_from_names() -> None:
    spec = parse_metadata({})
    d = names.METADATA_DEFAULTS
    assert spec.metric_name == d[names.META_METRIC_NAME]
    assert spec.selector == ""
    assert spec.source == "router"
    p = spec.policy
    assert p.slots_per_replica == int(d[names.META_SLOTS_PER_REPLICA])
    assert p.target_saturation == float(d[names.META_TARGET_SATURATION])
    assert p.scale_up_window_s == float(d[names.META_SCALE_UP_WINDOW_S])
    assert p.scale_down_window_s == float(d[names.META_SCALE_DOWN_WINDOW_S])
    assert p.activation_inflight == float(d[names.META_ACTIVATION_INFLIGHT])
    assert p.policy == d[names.META_POLICY]
    assert p.time_scale == float(d[names.META_TIME_SCALE])
    assert spec.scrape_interval_s == float(d[names.META_SCRAPE_INTERVAL_S])
    assert p.min_replicas == names.DEFAULT_MIN_REPLICA_COUNT == int(d["minReplicaCount"]) == 0
    assert p.max_replicas == names.DEFAULT_MAX_REPLICA_COUNT == int(d["maxReplicaCount"]) == 100


def test_the_policys_defaults_are_the_metadatas() -> None:
    """``PolicySpec()`` and ``parse_metadata({})`` agree: one set of defaults (names.py),
    except the sample-gap limit, which only the metadata's scrape interval sets."""
    from inflight.control.policy import PolicySpec

    parsed = parse_metadata({})
    assert replace(parsed.policy, max_sample_gap_s=math.inf) == PolicySpec()
    assert parsed == ScalerSpec(
        metric_name=names.DEFAULT_METRIC_NAME,
        selector="",
        source="router",
        policy=parsed.policy,
    )


def test_what_inflight_up_sends() -> None:
    from inflight.control.trigger import scaler_metadata

    assert scaler_metadata(4, 0.1, "saturation") == {
        "slotsPerReplica": "4",
        "targetSaturation": "1.0",
        "scaleUpWindowSeconds": "10",
        "scaleDownWindowSeconds": "60",
        "timeScale": "0.1",
        "policy": "saturation",
        "minReplicaCount": "0",  # KEDA's defaults unless the caller gives its bounds
        "maxReplicaCount": "100",
        "scrapeIntervalSeconds": "1",  # 5 s x 0.1, at least 1 s
    }
    bounded = scaler_metadata(4, 0.1, "saturation", min_replicas=1, max_replicas=3)
    assert (bounded["minReplicaCount"], bounded["maxReplicaCount"]) == ("1", "3")
    assert (
        parse_metadata(bounded).policy.min_replicas,
        parse_metadata(bounded).policy.max_replicas,
    ) == (1, 3)
    spec = parse_metadata(
        {
            "slotsPerReplica": "4",
            "targetSaturation": "1.0",
            "scaleUpWindowSeconds": "10",
            "scaleDownWindowSeconds": "60",
            "timeScale": "0.1",
            "policy": "saturation",
            # KEDA's own keys, ignored
            "scalerAddress": "scaler.llm:9090",
            "enableTLS": "true",
            "unsafeSsl": "false",
            "scalerAddressFromEnv": "SCALER",
        }
    )
    assert spec.policy.scale_up_window_s == pytest.approx(1.0)
    assert spec.policy.scale_down_window_s == pytest.approx(6.0)
    assert spec.policy.time_scale == 0.1


def test_from_env_stands_for_the_key() -> None:
    assert parse_metadata({"slotsPerReplicaFromEnv": "8"}).policy.slots_per_replica == 8
    with pytest.raises(MetadataError, match="not both"):
        parse_metadata({"slotsPerReplica": "4", "slotsPerReplicaFromEnv": "8"})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("slotsPerReplica", "0"),
        ("slotsPerReplica", "2.5"),
        ("slotsPerReplica", "-1"),
        ("slotsPerReplica", "four"),
        ("targetSaturation", "0"),
        ("targetSaturation", "nan"),
        ("targetSaturation", "1e3"),
        ("scaleUpWindowSeconds", "-5"),
        ("scaleDownWindowSeconds", "inf"),
        ("scaleDownWindowSeconds", "999999"),
        ("activationInflight", "-1"),
        ("timeScale", "0"),
        ("timeScale", "0.0001"),
        ("source", "kafka"),
        ("policy", "magic"),
        ("metricName", ""),
        ("metricName", "in flight"),
        ("metricName", "x" * 100),
        ("selector", "job=router"),
        ("minReplicaCount", "-1"),
        ("minReplicaCount", "1.5"),
        ("minReplicaCount", "101"),  # above the default maxReplicaCount
        ("maxReplicaCount", "0"),
        ("maxReplicaCount", "two"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(MetadataError) as err:
        parse_metadata({key: value})
    assert err.value.key == key
    assert repr(key) in str(err.value)
    assert "expected" in str(err.value)


def test_unknown_key_is_refused_with_the_accepted_keys() -> None:
    with pytest.raises(MetadataError, match="unknown key") as err:
        parse_metadata({"slotsPerReplicas": "4"})
    assert err.value.key == "slotsPerReplicas"
    assert "slotsPerReplica" in str(err.value)


def test_qps_policy_needs_router_source() -> None:
    with pytest.raises(MetadataError) as err:
        parse_metadata({"policy": "qps", "source": "vllm"})
    assert err.value.key == "policy"


def test_keda_keys_are_known() -> None:
    assert {"scalerAddress", "enableTLS", "unsafeSsl"} <= KEDA_KEYS


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        ("   ", ""),
        ('job="router"', 'job="router"'),
        (' job = "router" , namespace=~"llm-.*" ', 'job="router",namespace=~"llm-.*"'),
        ('a!="x",b!~"y|z",', 'a!="x",b!~"y|z"'),
        ('a="quote \\" and backslash \\\\"', 'a="quote \\" and backslash \\\\"'),
        ('a=""', 'a=""'),
    ],
)
def test_selector_accepts_label_matchers(text: str, canonical: str) -> None:
    assert parse_selector("selector", text) == canonical


@pytest.mark.parametrize(
    "text",
    [
        "job=router",
        'job="router"} or vector(1000) or {a="b"',
        'sum(x{a="b"})',
        'job="a" job="b"',
        "job='router'",
        "job=`router`",
        '__name__="x"',
        'a=~"("',
        'a="\\x41"',
        'a="unterminated',
        ',a="b"',
        'a="b",,c="d"',
        '1a="b"',
        'a=="b"',
    ],
)
def test_selector_refuses_anything_else(text: str) -> None:
    with pytest.raises(MetadataError) as err:
        parse_selector("selector", text)
    assert err.value.key == "selector"
    assert "label matchers" in str(err.value)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("(?=llm)", "invalid perl operator"),  # lookahead: Python's re takes it, RE2 does not
        ("(?<=x)y", "invalid perl operator"),  # lookbehind
        ("(a)\\\\1", "invalid escape"),  # backreference \1 (PromQL-escaped in the selector)
        ("a++", "bad repetition"),  # possessive quantifier
        ("x{1001}", "repetition size"),  # RE2's bound on counted repetition
    ],
)
def test_selector_regex_must_compile_in_re2(value: str, why: str) -> None:
    """Prometheus compiles matchers with RE2: a Perl-only regex would be refused on every
    query, so it is refused here, naming the key and the label."""
    with pytest.raises(MetadataError) as err:
        parse_metadata({"selectorFromEnv": f'ns="llm",job=~"{value}"'})
    assert err.value.key == "selectorFromEnv"
    assert "label job" in str(err.value) and "RE2" in str(err.value) and why in str(err.value)


@pytest.mark.parametrize("value", ["\\\\pL+", "[[:alpha:]]+-\\\\d", "(?i)LLM|router", "(?P<n>a)b"])
def test_selector_accepts_what_re2_accepts(value: str) -> None:
    # \pL (a Unicode class) is RE2 (and PromQL) syntax that Python's re refuses.
    assert parse_selector("selector", f'job=~"{value}"') == f'job=~"{value}"'


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=60))
def test_selector_fuzz_either_canonical_or_refused(text: str) -> None:
    try:
        canonical = parse_selector("selector", text)
    except MetadataError:
        return
    # A canonical form parses back to itself and holds no braces, parentheses outside quotes.
    assert parse_selector("selector", canonical) == canonical


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from([*names.METADATA_DEFAULTS, "scalerAddress", "bogus", "selectorFromEnv"]),
        st.one_of(
            st.sampled_from(["", "0", "1", "4", "0.1", "60", "nan", "-1", "router", "qps", "x"]),
            st.text(max_size=20),
        ),
        max_size=6,
    )
)
def test_metadata_fuzz_only_metadata_errors(metadata: dict[str, str]) -> None:
    try:
        spec = parse_metadata(metadata)
    except MetadataError as exc:
        assert exc.key in metadata
        return
    assert spec.policy.target > 0
    assert spec.policy.scale_down_window_s >= 0
