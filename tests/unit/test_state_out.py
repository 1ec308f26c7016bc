"""``peer --state-out PATH``: the final state is written where the start-up check accepted it."""

from __future__ import annotations

import json
import types
from pathlib import Path

import torch

from p2p_guard.swarm import peer


def test_the_final_state_goes_into_missing_folders(tmp_path: Path) -> None:
    """``peer --state-out /tmp/nonexist/x.pt`` passed the start-up check, ran, and ended in a RuntimeError
    traceback ("Parent directory /tmp/nonexist does not exist") with the final state lost."""
    from p2p_guard.swarm.events import EventLog

    theta = torch.arange(3, dtype=torch.float32)
    stub = types.SimpleNamespace(round=7, local=types.SimpleNamespace(
        theta=theta, momentum=torch.zeros(3), state_hash=lambda: bytes(2)))
    out = tmp_path / "a" / "b" / "final.pt"
    events = EventLog(tmp_path / "events.jsonl")
    peer._save_state(stub, types.SimpleNamespace(state_out=str(out)), events, 7)  # type: ignore[arg-type]
    events.close()
    saved = torch.load(out, weights_only=True)
    assert torch.equal(saved["theta"], theta) and saved["round"] == 7 and saved["state_hash"] == "0000"
    final = json.loads((tmp_path / "events.jsonl").read_text())
    assert (final["event"], final["state_path"], final["rounds_completed"]) == ("final", str(out), 7)
