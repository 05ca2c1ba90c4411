"""``inflight scaler`` flags: every bad combination is refused naming the flag."""

from __future__ import annotations

import pytest

from external_scaler.cli import UsageError, validate
from inflight.cli import build_parser


def parse(*argv: str):
    return build_parser().parse_args(["scaler", *argv])


def test_prometheus_is_the_default_source_with_a_url() -> None:
    assert validate(parse("--prometheus-url", "http://127.0.0.1:9090")) == "prometheus"


def test_direct_source() -> None:
    args = parse("--source", "direct", "--router-url", "http://a:1,http://b:2")
    assert validate(args) == "direct"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        ((), "--prometheus-url"),
        (("--source", "prometheus"), "--prometheus-url"),
        (("--prometheus-url", "127.0.0.1:9090"), "--prometheus-url"),
        (("--source", "direct"), "--router-url"),
        (("--source", "direct", "--router-url", "a:1"), "--router-url"),
        (("--prometheus-url", "http://p", "--grpc-port", "70000"), "--grpc-port"),
        (("--prometheus-url", "http://p", "--cache-ttl-s", "-1"), "--cache-ttl-s"),
        (("--prometheus-url", "http://p", "--call-budget-s", "0"), "--call-budget-s"),
        (("--prometheus-url", "http://p", "--tls-cert", "c.pem"), "--tls-key"),
        (("--prometheus-url", "http://p", "--tls-client-ca", "ca.pem"), "--tls-client-ca"),
    ],
)
def test_bad_flags_are_named(argv: tuple[str, ...], flag: str) -> None:
    with pytest.raises(UsageError, match=flag):
        validate(parse(*argv))


def test_run_reports_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("--source", "direct")
    assert args.func(args) == 2
    assert "--router-url" in capsys.readouterr().err
