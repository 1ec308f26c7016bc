"""A peer whose own updates could never pass its limits refuses to start (``swarm.peer.check_model_fits``)."""

from __future__ import annotations

import pytest

from p2p_guard.identity import Identity
from p2p_guard.swarm.config import PeerConfig
from p2p_guard.swarm.peer import check_model_fits

ME = Identity.from_seed(bytes([7]) * 32)
DIGITS = (4810, ((64, 64), (64,), (10, 64), (10,)), 179)  # d, shapes, n_samples


def test_the_defaults_fit_a_small_model() -> None:
    check_model_fits(PeerConfig(run_id="r", task="digits"), *DIGITS, ME)


def test_a_model_over_max_parameters_is_refused() -> None:
    config = PeerConfig(run_id="r", task="digits", max_parameters=4809)
    with pytest.raises(ValueError, match=r"^the task's model has 4,810 parameters, more than --max-parameters 4,809: every peer with this "
                                         r"limit \(this one too\) would reject our updates$"):
        check_model_fits(config, *DIGITS, ME)
    check_model_fits(PeerConfig(run_id="r", task="digits", max_parameters=4810), *DIGITS, ME)


def test_an_envelope_over_max_envelope_bytes_is_refused() -> None:
    config = PeerConfig(run_id="r", task="digits", max_envelope_bytes=1)
    with pytest.raises(ValueError, match=r"^our signed envelope is \d{3} bytes \(the model's 4 tensor shapes\), "
                                         r"more than --max-envelope-bytes 1: "):
        check_model_fits(config, *DIGITS, ME)


def test_an_envelope_exactly_at_the_limit_fits() -> None:
    with pytest.raises(ValueError) as refused:
        check_model_fits(PeerConfig(run_id="r", task="digits", max_envelope_bytes=1), *DIGITS, ME)
    size = int(str(refused.value).split(" bytes")[0].rsplit(" ", 1)[1])
    check_model_fits(PeerConfig(run_id="r", task="digits", max_envelope_bytes=size), *DIGITS, ME)
    with pytest.raises(ValueError, match="more than --max-envelope-bytes"):
        check_model_fits(PeerConfig(run_id="r", task="digits", max_envelope_bytes=size - 1), *DIGITS, ME)


def test_the_cli_refuses_before_the_peer_starts() -> None:
    """``peer_cmd.check_names`` (run before anything starts: exit 2, one line) builds the model and checks both limits."""
    from p2p_guard.cli import peer_cmd

    maddr = "/ip4/127.0.0.1/tcp/4000/p2p/QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"
    with pytest.raises(ValueError, match=r"^the task's model has 4,810 parameters, more than --max-parameters 4,809"):
        peer_cmd.check_names(PeerConfig(run_id="r", task="digits", initial_peers=(maddr,), max_parameters=4809))
    with pytest.raises(ValueError, match=r"^our signed envelope is \d{3} bytes .* more than --max-envelope-bytes 100:"):
        peer_cmd.check_names(PeerConfig(run_id="r", task="digits", initial_peers=(maddr,), max_envelope_bytes=100))
    peer_cmd.check_names(PeerConfig(run_id="r", task="digits", initial_peers=(maddr,)))
