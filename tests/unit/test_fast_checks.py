"""The CLI's early checks of names, addresses and data files answer without torch or hivemind (issue 11).

- The light name tables (``p2p_guard.plugin_names``, ``p2p_guard.tasks.registry``) are the registries' names:
  each registry's keys equal them, in order, so the light check and the registry cannot drift apart.
- ``preflight.check_names``, ``swarm.addresses.check_initial_peers`` and ``tasks.registry.check_task_files``
  import neither torch nor hivemind (run in a fresh interpreter), and reject what the heavy checks reject, with
  the same message.
- The light multiaddr check gives hivemind's verdict on every address tried, down to the exception's type.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from p2p_guard import plugin_names
from p2p_guard.cli.preflight import check_names, check_plugins

REPO = Path(__file__).resolve().parents[2]
PEER_ID = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
MADDR = f"/ip4/127.0.0.1/tcp/31337/p2p/{PEER_ID}"

#: Addresses good and bad; the light check must agree with hivemind's on each.
ADDRESSES = [
    MADDR,
    f"/ip6/::1/tcp/31337/p2p/{PEER_ID}",
    f"/dns4/example.org/tcp/31337/p2p/{PEER_ID}",
    f"/ip4/1.2.3.4/tcp/1/p2p/{PEER_ID}/p2p-circuit/p2p/{PEER_ID}",
    f"/ip4/127.0.0.1/udp/31337/quic/p2p/{PEER_ID}",
    "/ip4/127.0.0.1/tcp/31337",
    "/ip4/127.0.0.1/tcp/31337/p2p/abc",
    f"/ip4/999.1.1.1/tcp/1/p2p/{PEER_ID}",
    f"/ip4/127.0.0.1/tcp/99999/p2p/{PEER_ID}",
    f"/ip4/127.0.0.1/tcp/31337/p2p/{PEER_ID}0",
    f"/ip4/127.0.0.1/tcp/31337/p2p/{PEER_ID[:-1]}",
    f"/ip4/127.0.0.1/tcp/31337/p2p/{PEER_ID}/",
    f"/ip4/127.0.0.1/tcp/31337/nosuch/p2p/{PEER_ID}",
    f"ip4/127.0.0.1/tcp/31337/p2p/{PEER_ID}",
    f"127.0.0.1:31337/p2p/{PEER_ID}",
    "",
    "/",
    "x",
]


def _fresh(code: str) -> list[str]:
    """Run ``code`` in a fresh interpreter with this checkout first on the path; its stdout lines."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                          check=True)
    return done.stdout.splitlines()


class TestOneListOfNames:
    def test_guard_names_are_the_registry_keys(self) -> None:
        from p2p_guard.guard import registry

        assert tuple(registry._RULES) == plugin_names.GUARD_NAMES
        assert registry.GUARD_NAMES is plugin_names.GUARD_NAMES

    def test_attack_names_are_the_registry_keys(self) -> None:
        from p2p_guard.attacks import registry
        from p2p_guard.attacks.wire import WIRE_ATTACKS

        assert tuple(registry._BUILTIN) == plugin_names.MODEL_ATTACK_NAMES
        assert tuple(WIRE_ATTACKS) == plugin_names.WIRE_ATTACK_NAMES
        assert registry.ATTACK_NAMES is plugin_names.ATTACK_NAMES
        assert registry.WIRE_ATTACK_NAMES is plugin_names.WIRE_ATTACK_NAMES
        assert plugin_names.ATTACK_NAMES == (*registry._BUILTIN, *WIRE_ATTACKS)

    def test_task_files_checks_name_known_tasks(self) -> None:
        from p2p_guard.tasks import registry

        assert set(registry._FILE_CHECKS) <= set(registry.TASK_NAMES)


class TestLightChecksImportNothingHeavy:
    def test_names_addresses_and_files_in_a_fresh_interpreter(self, tmp_path: Path) -> None:
        code = (
            "import pathlib, sys\n"
            "from p2p_guard.cli.preflight import check_names\n"
            "from p2p_guard.swarm.addresses import check_initial_peers\n"
            "from p2p_guard.tasks import fashion_mnist_files\n"
            f"fashion_mnist_files.DEFAULT_DATA_DIR = pathlib.Path({str(tmp_path / 'none')!r})\n"
            "check_names('digits', 'trimmed_mean:f=1', 'alie:z=search')\n"
            "check_names('shakespeare', 'my_pkg.rules:Rule', 'my_pkg.attacks:Drift:eps=0.1')\n"
            f"check_initial_peers([{MADDR!r}])\n"
            "for args in [('nosuch', 'mean', None), ('digits', 'nosuch', None), ('digits', 'mean', 'nosuch'),\n"
            "             ('digits', 'mean:f', None), ('fashion-mnist', 'mean', None)]:\n"
            "    try:\n"
            "        check_names(*args)\n"
            "    except ValueError as e:\n"
            "        print('rejected:', str(e).split(';')[0])\n"
            "try:\n"
            "    check_initial_peers(['/ip4/127.0.0.1/tcp/31337'], what='--relays')\n"
            "except ValueError as e:\n"
            "    print('rejected:', str(e).split(':')[0])\n"
            "print('heavy:', sorted(m for m in ('torch', 'hivemind', 'numpy') if m in sys.modules))\n"
        )
        assert _fresh(code) == [
            "rejected: unknown task 'nosuch'",
            "rejected: guard spec 'nosuch': unknown guard 'nosuch'",
            "rejected: --attack 'nosuch' does not load: attack spec 'nosuch': unknown attack 'nosuch'",
            "rejected: bad guard spec 'mean:f': parameters are key=value, got 'f'",
            f"rejected: fashion-mnist: directory {tmp_path / 'none'} does not exist",
            "rejected: bad --relays address '/ip4/127.0.0.1/tcp/31337'",
            "heavy: []",
        ]


class TestLightAgreesWithHeavy:
    @pytest.mark.parametrize(("guard", "attack"), [
        ("nosuch", None), ("mean:", None), ("a:b:c:d", None), ("mean:f=1:x", None), ("mean:f", None),
        ("1bad", None), ("mean", "nosuch"), ("mean", "sign_flip:scale"), ("mean", "1bad"), ("mean", "x:y:z:w"),
    ])
    def test_what_the_light_check_rejects_the_heavy_one_rejects_alike(self, guard: str, attack: str | None) -> None:
        with pytest.raises(ValueError) as light:
            check_names("digits", guard, attack)
        with pytest.raises(ValueError) as heavy:
            check_plugins("digits", guard, attack)
        assert str(light.value) == str(heavy.value)

    def test_task_names_are_exact(self) -> None:
        with pytest.raises(ValueError, match=r"unknown task 'Digits'; known tasks: digits, fashion-mnist, shakespeare"):
            check_names("Digits", "mean")

    @pytest.mark.parametrize("guard", plugin_names.GUARD_NAMES)
    def test_every_builtin_guard_passes_both(self, guard: str) -> None:
        check_names("digits", guard)
        check_plugins("digits", guard)

    @pytest.mark.parametrize("attack", plugin_names.ATTACK_NAMES)
    def test_every_builtin_attack_passes_the_light_check(self, attack: str) -> None:
        check_names("digits", "mean", attack)

    def test_bad_parameters_are_still_caught_by_the_heavy_check(self) -> None:
        check_names("digits", "trimmed_mean:nosuch=1", "sign_flip:nosuch=1")  # the light check needs the class
        with pytest.raises(ValueError, match="unknown parameter"):
            check_plugins("digits", "trimmed_mean:nosuch=1")
        with pytest.raises(ValueError, match=r"--attack 'sign_flip:nosuch=1' does not load: .*unknown parameter\(s\) "
                                             r"nosuch; sign_flip takes scale"):
            check_plugins("digits", "mean", "sign_flip:nosuch=1")

    def test_more_peers_than_training_items_is_caught_up_front(self) -> None:
        """Every peer stopped at start ("cannot cut ..."), and simulate launched them again until its timeout."""
        check_plugins("digits", "mean", shard=(100, 99, "iid", 0))
        with pytest.raises(ValueError, match=r"^task .digits.: a shard of 1 item\(s\) cannot spare a hold-out"):
            check_plugins("digits", "mean", shard=(1437, 1436, "iid", 0))
        with pytest.raises(ValueError, match=r"^task 'digits': cannot cut 1437 items into 1438 non-empty shards "
                                             r"\(fewer peers, or a task with more data\)$"):
            check_plugins("digits", "mean", shard=(1438, 0, "iid", 0))
        with pytest.raises(ValueError, match=r"^task 'digits': cannot cut 1437 items into 1700 non-empty shards"):
            check_plugins("digits", "mean", shard=(1700, 3, "dirichlet:0.5", 0))

    def test_simulate_and_peer_refuse_more_peers_than_items(self, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
        from p2p_guard.cli.main import main

        maddr = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
        assert main(["simulate", "--honest", "1500", "--byzantine", "200", "--workdir", str(tmp_path / "w")]) == 2
        assert main(["peer", "--initial-peers", maddr, "--num-peers", "2000", "--peer-index", "3",
                     "--identity", str(tmp_path / "p.key")]) == 2
        assert capsys.readouterr().err.splitlines() == [
            "p2p-guard simulate: error: task 'digits': cannot cut 1437 items into 1700 non-empty shards (fewer "
            "peers, or a task with more data)",
            "p2p-guard peer: error: task 'digits': cannot cut 1437 items into 2000 non-empty shards (fewer peers, "
            "or a task with more data)",
        ]
        assert list(tmp_path.iterdir()) == []

    def test_peer_refuses_a_folder_where_its_checkpoint_goes(self, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
        """A folder named checkpoint.pt (or any file replaced each round) is refused at start, not at the first save."""
        from p2p_guard.cli.main import main

        maddr = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
        ckpt = tmp_path / "ckpt"
        errors = []
        for name in ("checkpoint.pt", "checkpoint.prev.pt", "last_commit", "known_peers.txt"):
            (ckpt / name).mkdir(parents=True)
            assert main(["peer", "--initial-peers", maddr, "--identity", str(tmp_path / "p.key"),
                         "--checkpoint-dir", str(ckpt)]) == 2
            errors += capsys.readouterr().err.splitlines()
            (ckpt / name).rmdir()
        assert errors == [f"p2p-guard peer: error: --checkpoint-dir {ckpt}: {ckpt / name} is a folder, not a file "
                          "(it is replaced on every round); move it away"
                          for name in ("checkpoint.pt", "checkpoint.prev.pt", "last_commit", "known_peers.txt")]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no identity created

    def test_peer_refuses_a_checkpoint_of_another_model(self, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
        """A restart with a mistyped --task ignored the intact checkpoint and overwrote both files in two rounds."""
        import torch

        from p2p_guard.cli.main import main
        from p2p_guard.swarm.checkpoint import Checkpoint, save_checkpoint

        maddr = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
        ckpt = tmp_path / "ckpt"
        for round_ in (7, 8):  # digits at hidden=64: 4810 parameters; checkpoint.pt and checkpoint.prev.pt
            save_checkpoint(ckpt, Checkpoint("h49run", round_, torch.zeros(4810), torch.zeros(4810)))
        before = {p.name: p.read_bytes() for p in ckpt.iterdir()}
        assert main(["peer", "--initial-peers", maddr, "--identity", str(tmp_path / "p.key"), "--run-id", "h49run",
                     "--task", "digits:hidden=32", "--checkpoint-dir", str(ckpt)]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"p2p-guard peer: error: {ckpt / 'checkpoint.pt'}: checkpoint of a model with 4810 parameters, ours has "
            "2410: start with the --task it was written with, or give another --checkpoint-dir (the checkpoint is "
            "left as it is)"]
        assert {p.name: p.read_bytes() for p in ckpt.iterdir()} == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no identity created

    def test_a_second_peer_with_the_same_identity_is_refused_at_start(self, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
        """On one machine, a second session of a key was refused only at its first commit, after a round's work."""
        from p2p_guard.cli.main import main
        from p2p_guard.cli.preflight import lock_identity
        from p2p_guard.identity import Identity

        key = tmp_path / "p.key"
        key.write_bytes(Identity.generate().to_key_bytes())
        key.chmod(0o600)
        maddr = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
        with lock_identity(key):
            with pytest.raises(ValueError, match=r"another peer or bootstrap node on this machine is running with this identity"):
                lock_identity(key)
            assert main(["peer", "--initial-peers", maddr, "--identity", str(key)]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"p2p-guard peer: error: --identity {key}: another peer or bootstrap node on this machine is running with "
            "this identity; stop it first, or give this one its own --identity"]
        with lock_identity(key):  # released on exit
            pass
        with lock_identity(tmp_path / "missing.key"):  # a key not created yet: nothing to lock
            assert not (tmp_path / "missing.key").exists()

    def test_a_second_peer_on_the_same_checkpoint_folder_is_refused_at_start(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A second peer (its own identity) on a running peer's --checkpoint-dir started, resumed from the first's
        checkpoint, and both overwrote each other's checkpoint and commit mark every round (helper-63)."""
        from p2p_guard.cli.main import main
        from p2p_guard.cli.preflight import lock_checkpoint_dir

        maddr = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
        ckpt = tmp_path / "new" / "ckpt"
        with lock_checkpoint_dir(ckpt):  # a missing folder is created to hold the lock
            assert sorted(p.name for p in ckpt.iterdir()) == [".lock"]
            with pytest.raises(ValueError, match=r"another peer on this machine is using this checkpoint folder"):
                lock_checkpoint_dir(ckpt)
            assert main(["peer", "--initial-peers", maddr, "--identity", str(tmp_path / "p.key"),
                         "--checkpoint-dir", str(ckpt)]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"p2p-guard peer: error: --checkpoint-dir {ckpt}: another peer on this machine is using this checkpoint "
            "folder; stop it first, or give this one its own --checkpoint-dir"]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["new"]  # no identity created
        with lock_checkpoint_dir(ckpt):  # released on exit
            pass
        with lock_checkpoint_dir(None):  # no checkpoint: nothing to lock
            pass

    def test_the_bootstrap_node_holds_its_identity_and_is_refused_a_held_one(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        """A second bootstrap node on a key in use started and shared its PeerID; a peer given the running bootstrap
        node's key said only that it could not reach its --initial-peers (helper-41)."""
        from p2p_guard.cli import bootstrap_cmd
        from p2p_guard.cli.main import main
        from p2p_guard.cli.preflight import lock_identity
        from p2p_guard.identity import Identity

        key = tmp_path / "b.key"
        key.write_bytes(Identity.generate().to_key_bytes())
        key.chmod(0o600)
        with lock_identity(key):
            assert main(["bootstrap", "--identity", str(key), "--port", "0"]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"p2p-guard bootstrap: error: --identity {key}: another peer or bootstrap node on this machine is "
            "running with this identity; stop it first, or give this one its own --identity"]
        held = []

        def run_locked(config: object) -> int:  # the node's life: a peer on its key is refused meanwhile
            with pytest.raises(ValueError, match="another peer or bootstrap node"):
                lock_identity(key)
            held.append(True)
            return 0

        monkeypatch.setattr(bootstrap_cmd, "_run_locked", run_locked)
        assert main(["bootstrap", "--identity", str(key), "--port", "0"]) == 0
        assert held == [True]
        with lock_identity(key):  # released when the node stops
            pass

    def test_multiaddr_verdicts_are_hiveminds(self) -> None:
        """The light check (hivemind's parser, loaded alone) against hivemind imported the usual way."""
        code = (
            "import json, sys\n"
            "from p2p_guard.swarm.addresses import PRIVATE_NAME, check_initial_peers\n"
            "out = []\n"
            f"for text in {ADDRESSES!r}:\n"
            "    try:\n"
            "        check_initial_peers([text])\n"
            "        out.append('ok')\n"
            "    except ValueError as e:\n"
            "        out.append(str(e).rsplit('(', 1)[-1].rstrip(')'))\n"
            "print(json.dumps(out))\n"
            "print(PRIVATE_NAME in sys.modules, 'hivemind' in sys.modules, 'torch' in sys.modules)\n"
        )
        light_lines = _fresh(code)
        from hivemind.p2p import PeerID
        from hivemind.utils.multiaddr import Multiaddr

        heavy = []
        for text in ADDRESSES:
            try:
                PeerID.from_base58(Multiaddr(text).value_for_protocol("p2p"))
                heavy.append("ok")
            except Exception as e:  # noqa: BLE001 - the verdict is the exception's type
                heavy.append(type(e).__name__)
        assert json.loads(light_lines[0]) == heavy
        assert "ok" in heavy  # the list tries good addresses
        assert len(set(heavy)) >= 3  # and several kinds of bad ones
        assert light_lines[1] == "True False False"

    def test_with_hivemind_imported_its_own_module_is_used(self) -> None:
        import hivemind.utils.multiaddr

        from p2p_guard.swarm import addresses, dht

        assert addresses._multiaddr_module() is hivemind.utils.multiaddr
        assert dht.check_initial_peers is addresses.check_initial_peers
        with pytest.raises(ValueError, match=r"bad --initial-peers address 'x': .*\(StringParseError\)"):
            addresses.check_initial_peers(["x"])
