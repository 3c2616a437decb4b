"""`python -m benchmarks NAME --help` shows that benchmark's own options; a missing or unknown
name is a usage error, not a traceback."""

from __future__ import annotations

import pytest

from benchmarks.__main__ import main


def test_a_benchmarks_help_lists_its_own_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as leaving:
        main(["wire", "--help"])
    assert leaving.value.code == 0
    shown = capsys.readouterr().out
    assert "--input RECORDS.jsonl" in shown and "--columns TYPES.json" in shown
    assert "--quick" in shown


def test_a_benchmark_without_options_still_has_help(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    with pytest.raises(SystemExit) as leaving:
        main(["ship", "-h"])
    assert leaving.value.code == 0
    assert "raw confluent-kafka consume" in capsys.readouterr().out


def test_help_without_a_name_lists_the_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "wire" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [[], ["nope"], ["ship", "--bogus"]])
def test_bad_usage_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as leaving:
        main(argv)
    assert leaving.value.code == 2
    assert "usage: python -m benchmarks" in capsys.readouterr().err
