"""Simulated adversarial peers: attacks as plugins, built-in by name or user-written as ``module:Class``.

Module map:

- ``base.py``: :class:`AttackContext` (what an attacker knows) and the :class:`UpdateAttack` /
  :class:`DataAttack` Protocols.
- ``update.py``: update attacks: :class:`SignFlip`, :class:`GaussianNoise`, :class:`Scale`,
  :class:`ALittleIsEnough` (ALIE, with :func:`alie_z` and ``z="search"``), :class:`InnerProductManipulation`
  (IPM), :class:`MinMax`, :class:`MinSum`, :class:`Mimic`.
- ``evasive.py``: :class:`Drift` (time-coupled), :class:`NullSpace` (evades a fixed public projection,
  :func:`public_projection`), :class:`Sleeper` (honest, then a sign flip).
- ``whitebox.py``: :class:`Adaptive` (passes every check of the guard) and the guard simulation that it and
  ``alie:z=search`` use.
- ``data.py``: data attacks: :class:`LabelFlip`, :class:`Backdoor` (with :func:`apply_trigger` for the attack
  success rate).
- ``wire.py``: wire attacks on the signed envelope and payload (``WIRE_ATTACKS``).
- ``apply.py``: :func:`attacked_update`, what the peer commits under an attack.
- ``registry.py``: :func:`parse_attack_spec`, :func:`load_attack`, :data:`ATTACK_NAMES`.
"""

from p2p_guard.attacks.apply import attacked_update
from p2p_guard.attacks.base import AttackContext, DataAttack, UpdateAttack
from p2p_guard.attacks.data import Backdoor, LabelFlip, apply_trigger
from p2p_guard.attacks.evasive import Drift, NullSpace, Sleeper, public_projection
from p2p_guard.attacks.registry import ATTACK_NAMES, WIRE_ATTACK_NAMES, load_attack, parse_attack_spec
from p2p_guard.attacks.update import (
    ALittleIsEnough,
    GaussianNoise,
    InnerProductManipulation,
    Mimic,
    MinMax,
    MinSum,
    Scale,
    SignFlip,
    alie_z,
)
from p2p_guard.attacks.whitebox import Adaptive

__all__ = [
    "ATTACK_NAMES",
    "WIRE_ATTACK_NAMES",
    "ALittleIsEnough",
    "Adaptive",
    "AttackContext",
    "Backdoor",
    "DataAttack",
    "Drift",
    "GaussianNoise",
    "InnerProductManipulation",
    "LabelFlip",
    "Mimic",
    "MinMax",
    "MinSum",
    "NullSpace",
    "Scale",
    "SignFlip",
    "Sleeper",
    "UpdateAttack",
    "alie_z",
    "apply_trigger",
    "attacked_update",
    "load_attack",
    "parse_attack_spec",
    "public_projection",
]
