from __future__ import annotations

import pytest

from inflight import __version__, cli


def test_version_flag_prints_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"inflight {__version__}"


def test_help_lists_exactly_the_subcommands_that_exist(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    available = cli.available_subcommands()
    for name, _module in cli.SUBCOMMAND_MODULES:
        listed = f"    {name} " in out or f"    {name}\n" in out
        assert listed == (name in available), f"{name}: listed={listed}"


def test_no_subcommand_prints_usage_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: inflight" in capsys.readouterr().err


def test_unknown_subcommand_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["no-such-command"])
    assert exc.value.code == 2
    assert "no-such-command" in capsys.readouterr().err


def test_missing_module_is_skipped_but_broken_import_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", (("ghost", "inflight_no_such_module_xyz"),))
    assert cli.available_subcommands() == []
