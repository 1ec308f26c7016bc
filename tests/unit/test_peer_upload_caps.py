"""``simulate --peer-upload-mbit PEER:MBIT``: one peer's own upload cap, parsed, checked and put on its command line.

Pure: no process is started (``run_simulation`` is replaced where ``simulate_cmd.run`` is called).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from p2p_guard.cli import simulate_cmd
from p2p_guard.cli.main import build_parser
from p2p_guard.simulation.config import SimulationConfig
from p2p_guard.simulation.orchestrator import peer_command
from p2p_guard.simulation.table import format_table

MADDRS = ["/ip4/127.0.0.1/tcp/1/p2p/Qm1"]


def _cap_in(command: list[str]) -> str | None:
    """The value after ``--max-upload-mbit`` in a peer command line, or None without the flag."""
    return command[command.index("--max-upload-mbit") + 1] if "--max-upload-mbit" in command else None


def test_the_named_peer_gets_its_own_cap_and_the_others_the_swarm_cap(tmp_path: Path) -> None:
    config = SimulationConfig(honest=4, byzantine=0, max_upload_mbit=24.0, peer_upload_mbit=("3:2.4",))
    assert config.peer_upload_caps() == {3: 2.4}
    assert [config.upload_mbit_of(i) for i in range(4)] == [24.0, 24.0, 24.0, 2.4]
    assert [_cap_in(peer_command(config, i, MADDRS, tmp_path)) for i in range(4)] == ["24.0", "24.0", "24.0", "2.4"]


def test_a_peer_cap_without_a_swarm_cap_leaves_the_others_unlimited(tmp_path: Path) -> None:
    config = SimulationConfig(honest=2, byzantine=1, peer_upload_mbit=(" 2 : 0.5 ", "0:50"))
    assert config.peer_upload_caps() == {2: 0.5, 0: 50.0}
    assert [_cap_in(peer_command(config, i, MADDRS, tmp_path)) for i in range(3)] == ["50.0", None, "0.5"]


def test_the_report_and_the_table_record_the_peer_caps() -> None:
    recorded = SimulationConfig(honest=4, byzantine=0, max_upload_mbit=24, peer_upload_mbit=("3:2.4",)).to_dict()
    assert recorded["peer_upload_mbit"] == ("3:2.4",)
    assert "codec=fp32 max_upload_mbit=24 peer_upload_mbit=3:2.4" in format_table({"config": recorded})
    assert "peer_upload_mbit" not in format_table({"config": SimulationConfig(honest=2, byzantine=0).to_dict()})


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (("3:0",), "peer_upload_mbit entry '3:0': the cap must be a finite number of Mbit/s > 0, got '0'"),
        (("3:-2.4",), "peer_upload_mbit entry '3:-2.4': the cap must be a finite number of Mbit/s > 0, got '-2.4'"),
        (("3:nan",), "peer_upload_mbit entry '3:nan': the cap must be a finite number of Mbit/s > 0, got 'nan'"),
        (("3:inf",), "peer_upload_mbit entry '3:inf': the cap must be a finite number of Mbit/s > 0, got 'inf'"),
        (("3:1e400",), "peer_upload_mbit entry '3:1e400': the cap must be a finite number of Mbit/s > 0, got '1e400'"),
        (("3:fast",), "peer_upload_mbit entry '3:fast': the cap must be a finite number of Mbit/s > 0, got 'fast'"),
        (("4:2",), "peer_upload_mbit entry '4:2': there is no peer 4 (the peers are 0..3: honest first, then "
                   "Byzantine)"),
        (("-1:2",), "peer_upload_mbit entry '-1:2' must be PEER:MBIT, a peer index and Mbit/s (3:2.4)"),
        (("3",), "peer_upload_mbit entry '3' must be PEER:MBIT, a peer index and Mbit/s (3:2.4)"),
        (("peer3:2",), "peer_upload_mbit entry 'peer3:2' must be PEER:MBIT, a peer index and Mbit/s (3:2.4)"),
        (("1:2", "1:3"), "peer_upload_mbit gives peer 1 twice ('1:3'); one cap per peer"),
        ((3,), "peer_upload_mbit entries must be PEER:MBIT strings (3:2.4), got 3"),
        ("3:2", "peer_upload_mbit must be a list of PEER:MBIT entries, got '3:2'"),
    ],
)
def test_bad_entries_are_refused_with_one_line(entries: object, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        SimulationConfig(honest=3, byzantine=1, peer_upload_mbit=entries)  # type: ignore[arg-type]


def test_the_flag_and_the_toml_key_both_set_it(tmp_path: Path) -> None:
    parse = build_parser().parse_args
    flag = simulate_cmd._config(parse(["simulate", "--honest", "4", "--byzantine", "0",
                                       "--peer-upload-mbit", "3:2.4", "1:12"]))
    assert flag.peer_upload_caps() == {3: 2.4, 1: 12.0}
    path = tmp_path / "sim.toml"
    path.write_text('[simulate]\nhonest = 4\nbyzantine = 0\nmax_upload_mbit = 24\npeer_upload_mbit = ["3:2.4"]\n')
    toml = simulate_cmd._config(parse(["simulate", "--config", str(path)]))
    assert toml.peer_upload_mbit == ("3:2.4",)
    assert [toml.upload_mbit_of(i) for i in range(4)] == [24.0, 24.0, 24.0, 2.4]


@pytest.mark.parametrize("value", ["3:0", "3:-1", "3:nan", "9:2"])
def test_simulate_exits_2_with_one_line_before_anything_starts(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import p2p_guard.simulation.orchestrator as orchestrator

    started: list[str] = []
    monkeypatch.setattr(orchestrator, "run_simulation", lambda *a, **k: started.append("simulate"))
    args = build_parser().parse_args(["simulate", "--honest", "4", "--byzantine", "0", "--peer-upload-mbit", value,
                                      "--workdir", str(tmp_path / "work")])
    assert simulate_cmd.run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"p2p-guard simulate: error: command line: peer_upload_mbit entry '{value}'")
    assert err.count("\n") == 1
    assert started == []
    assert not (tmp_path / "work").exists()

