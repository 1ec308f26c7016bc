"""Version 2 of the round, pure parts: sampling k senders, staleness weights, clipped gossip, robust centre,
consensus distance and the peer's own checkpoint (exact values on tiny inputs)."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import pytest
import torch

from p2p_guard.swarm.checkpoint import Checkpoint, CheckpointError, OtherModelCheckpoint, last_committed, \
    load_checkpoint, load_resumable, mark_committed, save_checkpoint
from p2p_guard.swarm.mixing import clipped_gossip, consensus_distance, gossip_steps, robust_centre
from p2p_guard.swarm.sampling import sample_senders, staleness_weight

PEERS = [f"peer{i:02d}" for i in range(20)]


class TestSampleSenders:
    def test_everyone_when_the_swarm_is_small(self) -> None:
        assert sample_senders(["c", "a", "b"], 8) == ["a", "b", "c"]

    def test_exactly_k_distinct_sorted(self) -> None:
        sample = sample_senders(PEERS, 8, random.Random(1))
        assert len(sample) == 8 and len(set(sample)) == 8 and sample == sorted(sample)
        assert set(sample) <= set(PEERS)

    def test_seeded_draw_is_reproducible_and_uniform(self) -> None:
        rng = random.Random(7)
        counts = dict.fromkeys(PEERS, 0)
        for _ in range(2000):
            for p in sample_senders(PEERS, 4, rng):
                counts[p] += 1
        assert sum(counts.values()) == 8000
        assert min(counts.values()) > 300 and max(counts.values()) < 500  # expected 400 each

    def test_default_randomness_is_private(self) -> None:
        draws = {tuple(sample_senders(PEERS, 3)) for _ in range(20)}
        assert len(draws) > 1

    def test_duplicates_count_once(self) -> None:
        assert sample_senders(["a", "a", "b"], 2) == ["a", "b"]

    @pytest.mark.parametrize("k", [0, -1])
    def test_rejects_k_below_one(self, k: int) -> None:
        with pytest.raises(ValueError, match="k must be >= 1"):
            sample_senders(PEERS, k)


class TestStalenessWeight:
    @pytest.mark.parametrize(("s", "w"), [(0, 1.0), (1, 1 / math.sqrt(2)), (3, 0.5), (8, 1 / 3)])
    def test_values(self, s: int, w: float) -> None:
        assert staleness_weight(s) == pytest.approx(w, rel=1e-12)

    def test_rejects_negative(self) -> None:
        with pytest.raises(ValueError, match="staleness must be >= 0"):
            staleness_weight(-1)


class TestClippedGossip:
    def test_unclipped_average_move(self) -> None:
        own = torch.tensor([0.0, 0.0, 10.0])
        a, b = torch.tensor([1.0, 0.0, 10.0]), torch.tensor([0.0, 1.0, 10.0])
        result = clipped_gossip(own, [a, b], max_radius=1.0)
        # tau = median(1, 1) = 1, nothing clipped: correction = (d_a + d_b) / 3
        assert result.tau == 1.0 and result.clipped == 0
        assert torch.allclose(result.correction, torch.tensor([1 / 3, 1 / 3, 0.0]))

    def test_byzantine_state_moves_us_at_most_tau_over_m_plus_one(self) -> None:
        own = torch.tensor([0.0, 0.0, 10.0])
        honest = [torch.tensor([0.1, 0.0, 10.0]), torch.tensor([0.0, 0.1, 10.0])]
        far = torch.tensor([1e6, 0.0, 10.0])
        result = clipped_gossip(own, [*honest, far], max_radius=1.0)
        assert result.tau == pytest.approx(0.1) and result.clipped == 1
        # the far state contributes clip(d, 0.1) = (0.1, 0, 0)
        assert torch.allclose(result.correction, torch.tensor([0.2 / 4, 0.1 / 4, 0.0]), atol=1e-7)

    def test_radius_cap_binds_with_a_byzantine_majority(self) -> None:
        own = torch.tensor([3.0, 4.0])  # |own| = 5
        far = [torch.tensor([1003.0, 4.0]), torch.tensor([3.0, 1004.0])]
        result = clipped_gossip(own, far, max_radius=0.01)
        assert result.tau == pytest.approx(0.05)
        assert float(result.correction.norm()) <= 2 * 0.05 / 3 + 1e-7

    def test_half_the_sample_at_our_state_still_moves_us_toward_the_other_half(self) -> None:
        own = torch.tensor([0.0, 10.0])
        same, other = [own.clone() for _ in range(4)], [torch.tensor([0.5, 10.0]) for _ in range(4)]
        result = clipped_gossip(own, [*same, *other], max_radius=1.0)
        # lower median 0 -> upper median 0.5: nothing clipped, 4 of 9 shares of the 0.5 gap
        assert result.tau == 0.5 and result.clipped == 0
        assert torch.allclose(result.correction, torch.tensor([4 * 0.5 / 9, 0.0]))
        lower = clipped_gossip(own, [*same[:3], *other[:4], own.clone(), torch.tensor([9.0, 10.0])], max_radius=1.0)
        assert lower.tau == 0.5  # 9 states, 4 at 0: the median is 0.5 already; the far one is clipped to it
        assert lower.clipped == 1

    def test_no_neighbours_no_move(self) -> None:
        own = torch.ones(3)
        result = clipped_gossip(own, [], max_radius=0.1)
        assert torch.equal(result.correction, torch.zeros(3)) and result.distances == ()

    def test_rejects_bad_input(self) -> None:
        with pytest.raises(ValueError, match="max_radius"):
            clipped_gossip(torch.ones(2), [torch.ones(2)], max_radius=0.0)
        with pytest.raises(ValueError, match="shape"):
            clipped_gossip(torch.ones(2), [torch.ones(3)], max_radius=0.1)

    def test_input_not_mutated(self) -> None:
        own, other = torch.zeros(2), torch.ones(2)
        clipped_gossip(own, [other], max_radius=1.0)
        assert torch.equal(own, torch.zeros(2)) and torch.equal(other, torch.ones(2))


class TestRobustCentre:
    def test_coordinatewise_median_ignores_one_outlier(self) -> None:
        states = [torch.tensor([1.0, 2.0]), torch.tensor([1.1, 2.1]), torch.tensor([1e9, -1e9])]
        assert torch.equal(robust_centre(states), torch.tensor([1.1, 2.0]))

    def test_rejects_empty_or_mixed_shapes(self) -> None:
        with pytest.raises(ValueError, match="at least one"):
            robust_centre([])
        with pytest.raises(ValueError, match="same shape"):
            robust_centre([torch.ones(2), torch.ones(3)])


class TestConsensusDistance:
    def test_values(self) -> None:
        a, b = torch.tensor([3.0, 4.0]), torch.tensor([3.0, 4.5])
        assert consensus_distance([a]) == 0.0
        assert consensus_distance([a, b]) == pytest.approx(0.5 / 5.0)

    def test_zero_norm(self) -> None:
        assert consensus_distance([torch.zeros(2), torch.zeros(2)]) == 0.0
        assert consensus_distance([torch.zeros(2), torch.ones(2)]) == math.inf


class TestCheckpoint:
    def ckpt(self) -> Checkpoint:
        return Checkpoint("run-1", 7, torch.arange(4, dtype=torch.float32), torch.ones(4),
                          {"ef_residual": torch.full((4,), 0.5)})

    def test_round_trip(self, tmp_path: Path) -> None:
        save_checkpoint(tmp_path, self.ckpt())
        loaded = load_checkpoint(tmp_path, run_id="run-1", numel=4)
        assert loaded is not None and loaded.round == 7
        assert torch.equal(loaded.theta, torch.arange(4, dtype=torch.float32))
        assert torch.equal(loaded.extra["ef_residual"], torch.full((4,), 0.5))
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".checkpoint-")], "temp file left"

    def test_missing_is_none(self, tmp_path: Path) -> None:
        assert load_checkpoint(tmp_path, run_id="run-1", numel=4) is None

    def test_refuses_other_run_or_model(self, tmp_path: Path) -> None:
        save_checkpoint(tmp_path, self.ckpt())
        with pytest.raises(CheckpointError, match="run"):
            load_checkpoint(tmp_path, run_id="run-2", numel=4)
        with pytest.raises(CheckpointError, match="parameters"):
            load_checkpoint(tmp_path, run_id="run-1", numel=5)

    def test_refuses_edited_or_corrupt(self, tmp_path: Path) -> None:
        path = save_checkpoint(tmp_path, self.ckpt())
        data = torch.load(path, weights_only=True)
        data["theta"][0] = 99.0
        torch.save(data, path)
        with pytest.raises(CheckpointError, match="digest"):
            load_checkpoint(tmp_path, run_id="run-1", numel=4)
        path.write_bytes(b"not a checkpoint")
        with pytest.raises(CheckpointError, match="unreadable"):
            load_checkpoint(tmp_path, run_id="run-1", numel=4)

    def test_corrupt_message_keeps_the_first_sentence(self, tmp_path: Path) -> None:
        path = save_checkpoint(tmp_path, self.ckpt())
        path.write_bytes(path.read_bytes()[:200])  # cut short: no zip central directory
        with pytest.raises(CheckpointError) as info:
            load_checkpoint(tmp_path, run_id="run-1", numel=4)
        message = str(info.value)
        assert message.startswith(f"{path}: unreadable checkpoint (RuntimeError: ")
        assert message.endswith(")")
        assert "This is an" not in message  # torch's second sentence (the old cut ended "This is an interna")

    def test_corrupt_message_is_cut_at_a_word(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        path = save_checkpoint(tmp_path, self.ckpt())

        def fails(*_args: object, **_kwargs: object) -> None:
            raise RuntimeError("PytorchStreamReader failed reading zip archive: failed finding central directory. "
                               "This is an internal error, please report it")

        monkeypatch.setattr(torch, "load", fails)
        with pytest.raises(CheckpointError) as info:
            load_checkpoint(tmp_path, run_id="run-1", numel=4)
        assert str(info.value) == (f"{path}: unreadable checkpoint (RuntimeError: PytorchStreamReader failed reading "
                                   "zip archive: failed finding central directory)")

        def fails_long(*_args: object, **_kwargs: object) -> None:
            raise RuntimeError("word " * 40)

        monkeypatch.setattr(torch, "load", fails_long)
        with pytest.raises(CheckpointError) as info:
            load_checkpoint(tmp_path, run_id="run-1", numel=4)
        assert str(info.value) == f"{path}: unreadable checkpoint (RuntimeError: {'word ' * 23}word…)"

    def test_a_truncated_checkpoint_falls_back_to_the_previous_one(self, tmp_path: Path) -> None:
        save_checkpoint(tmp_path, self.ckpt())
        newer = dataclasses.replace(self.ckpt(), round=8, theta=torch.full((4,), 2.0))
        path = save_checkpoint(tmp_path, newer)
        found = load_resumable(tmp_path, run_id="run-1", numel=4)
        assert found.checkpoint is not None and found.checkpoint.round == 8 and not found.problems
        path.write_bytes(path.read_bytes()[:200])  # as `head -c 20000 checkpoint.pt.good > checkpoint.pt` did
        found = load_resumable(tmp_path, run_id="run-1", numel=4)
        assert found.previous and found.checkpoint is not None and found.checkpoint.round == 7
        assert torch.equal(found.checkpoint.theta, torch.arange(4, dtype=torch.float32))
        assert len(found.problems) == 1 and found.problems[0].startswith(f"{path}: unreadable checkpoint (")

    def test_no_usable_checkpoint_is_a_fresh_start_with_the_reasons(self, tmp_path: Path) -> None:
        assert load_resumable(tmp_path, run_id="run-1", numel=4).checkpoint is None
        path = save_checkpoint(tmp_path, self.ckpt())
        path.write_bytes(b"garbage")
        found = load_resumable(tmp_path, run_id="run-1", numel=4)  # only one file ever written: no previous one
        assert found.checkpoint is None and not found.previous and len(found.problems) == 1
        save_checkpoint(tmp_path, self.ckpt())  # the garbage becomes checkpoint.prev.pt
        found = load_resumable(tmp_path, run_id="run-2", numel=4)
        assert found.checkpoint is None and len(found.problems) == 2

    def test_an_intact_checkpoint_of_another_model_is_not_skipped(self, tmp_path: Path) -> None:
        """Skipped, it was overwritten with the new model's by the next two rounds (a restart with a mistyped --task)."""
        save_checkpoint(tmp_path, self.ckpt())
        path = save_checkpoint(tmp_path, self.ckpt())
        with pytest.raises(OtherModelCheckpoint) as info:
            load_resumable(tmp_path, run_id="run-1", numel=5)
        assert str(info.value) == (f"{path}: checkpoint of a model with 4 parameters, ours has 5: start with the "
                                   "--task it was written with, or give another --checkpoint-dir (the checkpoint is "
                                   "left as it is)")
        path.write_bytes(b"garbage")  # damaged, then the previous one of another model: refused as well
        with pytest.raises(OtherModelCheckpoint, match=r"checkpoint\.prev\.pt: checkpoint of a model with 4 "):
            load_resumable(tmp_path, run_id="run-1", numel=5)
        found = load_resumable(tmp_path, run_id="run-2", numel=5)  # another run: skipped, as before
        assert found.checkpoint is None and len(found.problems) == 2

    def test_an_edited_checkpoint_of_another_size_is_skipped_as_damaged(self, tmp_path: Path) -> None:
        path = save_checkpoint(tmp_path, self.ckpt())
        data = torch.load(path, weights_only=True)
        data["theta"] = torch.zeros(5)
        torch.save(data, path)
        found = load_resumable(tmp_path, run_id="run-1", numel=5)
        assert found.checkpoint is None and found.problems == [f"{path}: digest mismatch (corrupt or edited checkpoint)"]

    def test_a_kill_between_the_renames_leaves_the_previous_one(self, tmp_path: Path) -> None:
        save_checkpoint(tmp_path, self.ckpt())
        save_checkpoint(tmp_path, self.ckpt())
        (tmp_path / "checkpoint.pt").unlink()
        found = load_resumable(tmp_path, run_id="run-1", numel=4)
        assert found.checkpoint is not None and found.previous and not found.problems

    def test_commit_mark(self, tmp_path: Path) -> None:
        assert last_committed(tmp_path) is None and last_committed(None) is None
        mark_committed(tmp_path, 3)
        mark_committed(tmp_path, 4)
        assert last_committed(tmp_path) == 4
        (tmp_path / "last_commit").write_text("garbage")
        assert last_committed(tmp_path) is None


@pytest.mark.parametrize(("present", "early", "steps"), [
    (1, False, 1), (9, False, 1), (18, False, 1), (19, False, 2), (32, False, 2), (36, False, 2), (37, False, 3),
    (1, True, 3), (18, True, 3), (19, True, 5), (32, True, 5), (37, True, 7), (73, True, 8), (1000, False, 7), (10000, False, 8),
])
def test_gossip_steps_grow_with_log_of_swarm_over_twice_the_fan_out(present: int, early: bool, steps: int) -> None:
    assert gossip_steps(present, 8, early=early, early_steps=3, max_steps=8) == steps


def test_gossip_steps_never_below_one() -> None:
    assert gossip_steps(5, 8, early=True, early_steps=1, max_steps=8) == 1
    assert gossip_steps(5, 0, early=False, early_steps=1, max_steps=1) == 1
