"""Simulated adversarial peers: attacks as plugins, built-in by name or user-written as ``module:Class``.

Module map:

- ``base.py``: :class:`AttackContext` (what an attacker knows) and the :class:`UpdateAttack` /
  :class:`DataAttack` Protocols.
- ``update.py``: update attacks: :class:`SignFlip`, :class:`GaussianNoise`, :class:`Scale`,
  :class:`ALittleIsEnough` (ALIE, with :func:`alie_z`), :class:`InnerProductManipulation` (IPM).
- ``data.py``: data attacks: :class:`LabelFlip`.
- ``wire.py``: wire attacks on the signed envelope and payload (``WIRE_ATTACKS``).
- ``registry.py``: :func:`parse_attack_spec`, :func:`load_attack`, :data:`ATTACK_NAMES`.
"""

from p2p_guard.attacks.base import AttackContext, DataAttack, UpdateAttack
from p2p_guard.attacks.data import LabelFlip
from p2p_guard.attacks.registry import ATTACK_NAMES, WIRE_ATTACK_NAMES, load_attack, parse_attack_spec
from p2p_guard.attacks.update import (
    ALittleIsEnough,
    GaussianNoise,
    InnerProductManipulation,
    Scale,
    SignFlip,
    alie_z,
)

__all__ = [
    "ATTACK_NAMES",
    "WIRE_ATTACK_NAMES",
    "ALittleIsEnough",
    "AttackContext",
    "DataAttack",
    "GaussianNoise",
    "InnerProductManipulation",
    "LabelFlip",
    "Scale",
    "SignFlip",
    "UpdateAttack",
    "alie_z",
    "load_attack",
    "parse_attack_spec",
]
