"""Attacks: hand-worked answers (one class per attack), parameter checks, and the spec registry."""

from __future__ import annotations

import importlib.util
import math
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from p2p_guard.attacks import (
    ATTACK_NAMES,
    WIRE_ATTACK_NAMES,
    ALittleIsEnough,
    AttackContext,
    DataAttack,
    GaussianNoise,
    InnerProductManipulation,
    LabelFlip,
    Scale,
    SignFlip,
    UpdateAttack,
    alie_z,
    load_attack,
    parse_attack_spec,
)

HAS_WIRE = importlib.util.find_spec("p2p_guard.attacks.wire") is not None


def make_ctx(n: int = 8, f: int = 2, seed: int = 0) -> AttackContext:
    return AttackContext(round=1, n=n, f=f, generator=torch.Generator().manual_seed(seed))


KNOWN = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.0, 0.5], [2.0, 2.0, 0.5]])


class TestAttackContext:
    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"round": -1}, "round"),
            ({"n": 0}, "n must"),
            ({"f": -1}, "f must"),
            ({"n": 3, "f": 4}, "f must be <= n"),
        ],
    )
    def test_rejects_bad_fields(self, kwargs: dict[str, int], match: str) -> None:
        fields = {"round": 0, "n": 8, "f": 2, **kwargs}
        with pytest.raises(ValueError, match=match):
            AttackContext(generator=torch.Generator(), **fields)  # type: ignore[arg-type]


class TestSignFlip:
    def test_known_answer(self) -> None:
        assert torch.equal(SignFlip()(KNOWN, make_ctx()), torch.tensor([-1.0, 2.0, -0.5]))
        assert torch.equal(SignFlip(scale=10)(KNOWN, make_ctx()), torch.tensor([-10.0, 20.0, -5.0]))

    @pytest.mark.parametrize("scale", [0.0, -1.0, math.inf, "10"])
    def test_rejects_bad_scale(self, scale: object) -> None:
        with pytest.raises(ValueError, match="^scale must"):
            SignFlip(scale=scale)  # type: ignore[arg-type]


class TestGaussianNoise:
    def test_reproducible_from_the_generator(self) -> None:
        a = GaussianNoise(std=2.0)(KNOWN, make_ctx(seed=5))
        b = GaussianNoise(std=2.0)(KNOWN, make_ctx(seed=5))
        c = GaussianNoise(std=2.0)(KNOWN, make_ctx(seed=6))
        assert torch.equal(a, b)
        assert not torch.equal(a, c)
        assert torch.equal(a, 2.0 * torch.randn(3, generator=torch.Generator().manual_seed(5)))

    def test_standard_deviation(self) -> None:
        out = GaussianNoise(std=3.0)(torch.zeros(1, 20000), make_ctx())
        assert abs(float(out.std()) - 3.0) < 0.1

    def test_rejects_bad_std(self) -> None:
        with pytest.raises(ValueError, match="^std must"):
            GaussianNoise(std=0.0)


class TestScale:
    def test_known_answer(self) -> None:
        assert torch.equal(Scale()(KNOWN, make_ctx()), torch.tensor([10.0, -20.0, 5.0]))
        assert torch.equal(Scale(factor=1000)(KNOWN[:1], make_ctx()), torch.tensor([1000.0, -2000.0, 500.0]))

    def test_rejects_bad_factor(self) -> None:
        with pytest.raises(ValueError, match="^factor must"):
            Scale(factor=-10.0)


class TestALittleIsEnough:
    @pytest.mark.parametrize(
        ("n", "f", "z"), [(8, 2, 0.0), (25, 5, 0.25335), (8, 1, -0.18001), (50, 24, 1.42608)]
    )
    def test_z_formula(self, n: int, f: int, z: float) -> None:
        assert alie_z(n, f) == pytest.approx(z, abs=1e-4)

    def test_z_clamped_in_degenerate_cases(self) -> None:
        assert alie_z(2, 0) == pytest.approx(-3.0902, abs=1e-3)  # p = 0
        assert alie_z(4, 3) == pytest.approx(3.0902, abs=1e-3)  # p = 1: Byzantine majority
        with pytest.raises(ValueError, match="0 <= f < n"):
            alie_z(4, 4)

    def test_known_answer(self) -> None:
        # Per coordinate: mean (2, 0, 0.5), sample std (1, 2, 0).
        out = ALittleIsEnough(z=1.5)(KNOWN, make_ctx())
        assert torch.allclose(out, torch.tensor([0.5, -3.0, 0.5]))

    def test_z_from_context(self) -> None:
        ctx = make_ctx(n=25, f=5)
        expected = KNOWN.mean(dim=0) - alie_z(25, 5) * KNOWN.std(dim=0)
        assert torch.allclose(ALittleIsEnough()(KNOWN, ctx), expected)

    def test_one_known_row_has_no_spread(self) -> None:
        assert torch.equal(ALittleIsEnough(z=1.5)(KNOWN[:1], make_ctx()), KNOWN[0])

    @pytest.mark.parametrize("z", [-0.5, math.nan, True])
    def test_rejects_bad_z(self, z: object) -> None:
        with pytest.raises(ValueError, match="^z must"):
            ALittleIsEnough(z=z)  # type: ignore[arg-type]


class TestInnerProductManipulation:
    def test_known_answer(self) -> None:
        out = InnerProductManipulation()(KNOWN, make_ctx())
        assert torch.allclose(out, torch.tensor([-0.2, 0.0, -0.05]))
        assert torch.allclose(
            InnerProductManipulation(epsilon=100)(KNOWN, make_ctx()), torch.tensor([-200.0, 0.0, -50.0])
        )

    def test_rejects_bad_epsilon(self) -> None:
        with pytest.raises(ValueError, match="^epsilon must"):
            InnerProductManipulation(epsilon=0)


UPDATE_ATTACKS = [
    SignFlip(scale=2),
    GaussianNoise(),
    Scale(),
    ALittleIsEnough(z=1.0),
    InnerProductManipulation(),
]


@pytest.mark.parametrize("attack", UPDATE_ATTACKS, ids=repr)
class TestUpdateAttackProperties:
    def test_protocol_and_kind(self, attack: UpdateAttack) -> None:
        assert isinstance(attack, UpdateAttack)
        assert attack.kind == "update"

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    def test_shape_dtype_and_input_kept(self, attack: UpdateAttack, dtype: torch.dtype) -> None:
        known = KNOWN.to(dtype)
        before = known.clone()
        out = attack(known, make_ctx())
        assert out.shape == (3,)
        assert out.dtype == dtype
        assert torch.equal(known, before)

    def test_rejects_malformed_known(self, attack: UpdateAttack) -> None:
        with pytest.raises(ValueError, match="known must be"):
            attack(torch.zeros(0, 3), make_ctx())
        with pytest.raises(ValueError, match="known must be"):
            attack(torch.zeros(3), make_ctx())


class TestLabelFlip:
    def test_known_answer(self) -> None:
        x = torch.randn(3, 4)
        x_out, y_out = LabelFlip().transform(x, torch.tensor([0, 3, 9]), 10)
        assert x_out is x
        assert torch.equal(y_out, torch.tensor([9, 6, 0]))

    def test_language_model_targets(self) -> None:
        y = torch.tensor([[0, 1, 64], [5, 5, 2]])
        _, y_out = LabelFlip().transform(torch.zeros(2, 3), y, 65)
        assert torch.equal(y_out, torch.tensor([[64, 63, 0], [59, 59, 62]]))
        assert torch.equal(y, torch.tensor([[0, 1, 64], [5, 5, 2]]))
        assert y_out.dtype == y.dtype

    def test_protocol_and_kind(self) -> None:
        assert isinstance(LabelFlip(), DataAttack)
        assert LabelFlip.kind == "data"

    @pytest.mark.parametrize(
        ("y", "num_classes", "match"),
        [
            (torch.tensor([0.0, 1.0]), 10, "integer tensor"),
            (torch.tensor([0, 10]), 10, r"\[0, 10\)"),
            (torch.tensor([-1, 0]), 10, r"\[0, 10\)"),
            (torch.tensor([0]), 0, "num_classes"),
        ],
    )
    def test_rejects_bad_labels(self, y: torch.Tensor, num_classes: int, match: str) -> None:
        with pytest.raises(ValueError, match=match):
            LabelFlip().transform(torch.zeros(len(y)), y, num_classes)


class TestParseSpec:
    @pytest.mark.parametrize(
        ("spec", "expected"),
        [
            ("sign_flip", ("sign_flip", {})),
            ("sign_flip:scale=10", ("sign_flip", {"scale": 10.0})),
            ("alie:z=1.5", ("alie", {"z": 1.5})),
            ("noise:std=1e-3", ("noise", {"std": 0.001})),
            ("x:a=true,b=False,c=-3,d=word", ("x", {"a": True, "b": False, "c": -3, "d": "word"})),
            ("pkg.mod:Drift", ("pkg.mod:Drift", {})),
            ("pkg.mod:Drift:eps=0.01, k=2", ("pkg.mod:Drift", {"eps": 0.01, "k": 2})),
        ],
    )
    def test_good_specs(self, spec: str, expected: tuple[str, dict[str, object]]) -> None:
        assert parse_attack_spec(spec) == expected

    def test_value_types(self) -> None:
        _, params = parse_attack_spec("a:i=10,f=10.0,b=TRUE,s=abc")
        assert [type(v) for v in params.values()] == [int, float, bool, str]

    @pytest.mark.parametrize(
        "spec",
        [
            "",
            "sign_flip:",
            "sign_flip:scale",
            "sign_flip:=3",
            "sign_flip:scale=1,scale=2",
            "sign_flip:scale=1,",
            "a:b:c:d",
            "9lives",
            "pkg..mod:Cls",
            "pkg.mod:Cls:x",
        ],
    )
    def test_bad_specs_name_the_spec(self, spec: str) -> None:
        with pytest.raises(ValueError, match=f"spec {spec!r}"):
            parse_attack_spec(spec)


USER_MODULE = """
import torch

class Drift:
    kind = "update"

    def __init__(self, eps=0.1):
        self.eps = eps

    def __call__(self, known, ctx):
        return known[0] + self.eps


class NoCall:
    kind = "update"


class NoTransform:
    kind = "data"

    def __call__(self, known, ctx):
        return known[0]


class NoKind:
    def __call__(self, known, ctx):
        return known[0]
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "user_attacks_for_test.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_attacks_for_test", raising=False)
    return "user_attacks_for_test"


class TestLoadAttack:
    @pytest.mark.parametrize(
        ("spec", "cls", "fields"),
        [
            ("sign_flip:scale=10", SignFlip, {"scale": 10}),
            ("noise:std=0.5", GaussianNoise, {"std": 0.5}),
            ("scale:factor=1000", Scale, {"factor": 1000}),
            ("alie", ALittleIsEnough, {"z": None}),
            ("ipm:epsilon=100", InnerProductManipulation, {"epsilon": 100}),
            ("label_flip", LabelFlip, {}),
        ],
    )
    def test_builtins(self, spec: str, cls: type, fields: dict[str, object]) -> None:
        attack = load_attack(spec)
        assert type(attack) is cls
        assert all(getattr(attack, k) == v for k, v in fields.items())

    def test_names(self) -> None:
        assert ATTACK_NAMES[:6] == ("sign_flip", "noise", "scale", "alie", "ipm", "label_flip")
        assert set(WIRE_ATTACK_NAMES) <= set(ATTACK_NAMES)

    @pytest.mark.skipif(not HAS_WIRE, reason="p2p_guard/attacks/wire.py not written yet")
    @pytest.mark.parametrize("name", WIRE_ATTACK_NAMES)
    def test_wire_attacks_load_lazily(self, name: str) -> None:
        attack = load_attack(name)
        assert attack.kind == "wire"
        assert callable(attack.mutate)

    @pytest.mark.parametrize(
        ("spec", "match"),
        [
            ("sign_flop", "unknown attack 'sign_flop'"),
            ("sign_flip:scal=10", r"unknown parameter\(s\) scal; sign_flip takes scale$"),
            ("sign_flip:scale=-1", "scale must"),
            ("no_such_module_xyz:Cls", "cannot import module"),
        ],
    )
    def test_errors(self, spec: str, match: str) -> None:
        with pytest.raises(ValueError, match=match):
            load_attack(spec)

    def test_user_class(self, user_module: str) -> None:
        attack = load_attack(f"{user_module}:Drift:eps=0.5")
        assert torch.equal(attack(KNOWN, make_ctx()), KNOWN[0] + 0.5)
        assert isinstance(attack, UpdateAttack)

    @pytest.mark.parametrize(
        ("cls", "match"),
        [
            ("NoCall", r"no method __call__\(\)"),
            ("NoTransform", r"no method transform\(\)"),
            ("NoKind", "must define kind"),
            ("Missing", "has no class 'Missing'"),
        ],
    )
    def test_user_class_errors(self, user_module: str, cls: str, match: str) -> None:
        with pytest.raises(ValueError, match=match):
            load_attack(f"{user_module}:{cls}")
