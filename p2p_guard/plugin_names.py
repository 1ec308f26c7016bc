"""The built-in guard and attack names, and a check of a spec against them that imports neither torch nor hivemind.

The CLI checks ``--guard`` and ``--attack`` here before anything heavy is imported, so a typo is reported in a
fraction of a second instead of after torch's few seconds of import. These tuples are the one list of the names:
:mod:`p2p_guard.guard.registry` and :mod:`p2p_guard.attacks.registry` publish them as their ``GUARD_NAMES`` /
``ATTACK_NAMES`` / ``WIRE_ATTACK_NAMES`` and map each one to its class, and a unit test asserts that each
registry's keys are exactly these names, in this order. The messages for an unknown name are built here too, so
the light check and the registries word them alike.
"""

from __future__ import annotations

from collections.abc import Callable

from p2p_guard.plugin_spec import parse_spec

__all__ = [
    "ATTACK_NAMES",
    "GUARD_NAMES",
    "MODEL_ATTACK_NAMES",
    "WIRE_ATTACK_NAMES",
    "check_attack_name",
    "check_guard_name",
    "unknown_attack_error",
    "unknown_guard_error",
]

GUARD_NAMES: tuple[str, ...] = (
    "mean",
    "median",
    "trimmed_mean",
    "multi_krum",
    "geometric_median",
    "centered_clipping",
    "nnm_trimmed_mean",
    "own_update",
    "semantic",
)
"""Every built-in name ``build_guard`` accepts (the keys of ``p2p_guard.guard.registry._RULES``, in order)."""

MODEL_ATTACK_NAMES: tuple[str, ...] = (
    "sign_flip",
    "noise",
    "scale",
    "alie",
    "ipm",
    "label_flip",
    "free_rider",
    "min_max",
    "min_sum",
    "mimic",
    "drift",
    "null_space",
    "sleeper",
    "backdoor",
    "adaptive",
)
"""Built-in update and data attacks (the keys of ``p2p_guard.attacks.registry._BUILTIN``, in order)."""

WIRE_ATTACK_NAMES: tuple[str, ...] = (
    "copycat",
    "equivocate",
    "forged_signature",
    "impersonate",
    "replay",
    "unsigned",
    "bad_signature",
    "wrong_run",
    "wrong_round",
    "stale_base",
    "digest_mismatch",
    "wrong_shape",
    "nan",
    "oversized",
    "vote_smear",
    "slowloris",
)
"""Wire attacks (the keys of ``p2p_guard.attacks.wire.WIRE_ATTACKS``, in this order)."""

ATTACK_NAMES: tuple[str, ...] = (*MODEL_ATTACK_NAMES, *WIRE_ATTACK_NAMES)
"""Every built-in attack name ``load_attack`` accepts."""


def unknown_guard_error(spec: str, name: str) -> ValueError:
    """The error for a guard spec whose built-in ``name`` is not one of :data:`GUARD_NAMES` (returned, not raised)."""
    return ValueError(f"guard spec {spec!r}: unknown guard {name!r}; expected one of {', '.join(GUARD_NAMES)} "
                      f"or MODULE:CLASS")


def unknown_attack_error(spec: str, name: str) -> ValueError:
    """The error for an attack spec whose built-in ``name`` is not one of :data:`ATTACK_NAMES` (returned)."""
    return ValueError(f"attack spec {spec!r}: unknown attack {name!r}; expected one of {', '.join(ATTACK_NAMES)}")


def check_guard_name(spec: str) -> None:
    """Check a guard spec's syntax and, for a built-in name, that the name exists; imports nothing heavy.

    ``MODULE:CLASS`` specs and the parameters are left to ``build_guard`` (they need the class).

    Raises:
        ValueError: on bad syntax or an unknown built-in name (the messages ``build_guard`` gives).
    """
    _check_name(spec, "guard", GUARD_NAMES, unknown_guard_error)


def check_attack_name(spec: str) -> None:
    """Check an attack spec's syntax and, for a built-in name, that the name exists; imports nothing heavy.

    ``MODULE:CLASS`` specs and the parameters are left to ``load_attack`` (they need the class).

    Raises:
        ValueError: on bad syntax or an unknown built-in name (the messages ``load_attack`` gives).
    """
    _check_name(spec, "attack", ATTACK_NAMES, unknown_attack_error)


def _check_name(spec: str, what: str, names: tuple[str, ...], error: Callable[[str, str], ValueError]) -> None:
    name, _ = parse_spec(spec, what=what, builtin_names=names)
    if ":" not in name and name not in names:
        raise error(spec, name)
