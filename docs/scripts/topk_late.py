"""``topk:…,dense=head`` over 40 rounds: what its top-k step sends, and whether a smaller α late closes the gap.

    python docs/scripts/topk_late.py base 0 40                 # the codec and outer step as shipped (α = 3)
    python docs/scripts/topk_late.py stepdecay:20:1.5 0 40     # α = 3 in rounds 0-19, 1.5 from round 20 on
    python docs/scripts/topk_late.py densenest:20 0 40         # the dense set: lr 1, from round 20 Nesterov (0.7, 0.9)
    python docs/scripts/topk_late.py base 0 40 topk:density=0.03,dense=head   # another codec, stepped as shipped
    python docs/scripts/topk_late.py invsqrt:10:4 0 40         # α_r = 4 / sqrt(1 + r / 10) (not run to the end)
    python docs/scripts/topk_late.py mom:0.5:1.5 0 40          # Nesterov μ = 0.5, lr 1.5 on the top-k part (not run)
    python docs/scripts/topk_late.py mom:0.9:0.3 0 40          # Nesterov μ = 0.9, lr 0.3 on the top-k part
    python docs/scripts/topk_late.py bias:1 0 40               # top-k of |a|·(1 + 1·[sign agrees with the last
                                                               # round's net vote of >= 2 senders])
    python docs/scripts/topk_late.py exact 0 40                # the codec's coordinates with exact float32 values
    python docs/scripts/topk_late.py agree:0.5 0 40            # a coordinate only one worker sent: weight 0.5 in
                                                               # the mean, its sender keeps the other half in e
    TOPK_LATE_CHUNK=65536 python docs/scripts/topk_late.py base 0 40   # the codec with chunk C = 65536, not 4096

Arguments: VARIANT SEED ROUNDS [CODEC]. An exploratory measurement, not a default: ``bench.wire.convergence``
(Shakespeare, 8 workers, the mean of the decoded rows, one torch thread, evaluation every 10 rounds) with
``training.outer.OuterNesterov.step`` patched for the run only, so that the top-k coordinates step with the
variant's α (the dense set keeps lr 1 unless the variant says otherwise). For worker 0's outer step of each
round r it prints: the cosine between α times the aggregate's top-k part and the mean of the 8 workers' raw
pseudo-gradients Δ on the same coordinates (what fp32 averages), the ratio of their norms, the fraction of the
top-k coordinates any worker sent, the fraction of those sent by a single worker, and the norm of the mean Δ;
then the perplexity after every 10 rounds (``EVAL``: the text says "round 0" whatever the round; it follows the
``round r`` line of round r = 9, 19, ...) and a ``RESULT`` line with the curve. Kept as it ran (written in a
hurry: module-level patches, no main()).

The measurements and their commands are in docs/protocol.md §2 ("Over 40 rounds the gap grows", and the table of
``mom``, ``TOPK_LATE_CHUNK``, ``agree``, ``bias`` and ``exact`` after it: the first four were stopped after round 20,
behind the shipped codec there).
"""
import os, sys, time, torch
import p2p_guard.bench.wire as wire
from p2p_guard.protocol import sparse as sparse_mod
if os.environ.get("TOPK_LATE_CHUNK"):  # the codec's chunk C patched for the run (indices stay uint16: C <= 65536)
    sparse_mod.TOPK_CHUNK = int(os.environ["TOPK_LATE_CHUNK"])
from p2p_guard.training import outer as outer_mod

variant, seed, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
codec = sys.argv[4] if len(sys.argv) > 4 else "topk:density=0.02,dense=head"
torch.set_num_threads(1)
orig = outer_mod.OuterNesterov.step
kind, *par = variant.split(":")
par = [float(p) for p in par]

def step(self, theta, aggregate):
    r = getattr(self, "_r", 0); self._r = r + 1
    if not FIRST:
        FIRST.append(id(self))
    if id(self) == FIRST[0]:
        print(f"round {r} {time.time() - T0:.0f} s", flush=True)
        if self.dense is not None:
            alpha = {"base": self.lr, "stepdecay": (self.lr if kind == "stepdecay" and r < (par or [0])[0] else (par[1] if kind == "stepdecay" else 0)),
                     "invsqrt": (par[1] / (1 + r / par[0]) ** 0.5 if kind == "invsqrt" else 0)}.get(kind, self.lr)
            diag(self, aggregate, alpha)
    if kind in ("base", "agree", "bias", "exact") or self.dense is None:
        return orig(self, theta, aggregate)
    mask, dlr = self.dense
    if kind == "stepdecay":  # alpha=lr for r<R then A2
        R, a2 = par
        alpha = self.lr if r < R else a2
        step = aggregate * alpha
    elif kind == "invsqrt":  # alpha_r = A0 / sqrt(1 + r / R)
        R, a0 = par
        step = aggregate * (a0 / (1 + r / R) ** 0.5)
    elif kind == "mom":  # heavy-ball/Nesterov momentum MU on top-k coords with lr ALPHA
        mu, alpha = par
        b = getattr(self, "_b", None)
        g = aggregate.clone(); g[mask] = 0
        b = g.clone() if b is None else b.mul(mu).add_(g)
        self._b = b
        step = (g + mu * b) * alpha
    elif kind == "densenest":  # dense set: lr 1 before round R, DiLoCo Nesterov (0.7, 0.9) from R on
        (R,) = par
        step = aggregate * self.lr
        if r >= R:
            g = aggregate[mask]
            b = getattr(self, "_b", None)
            b = g.clone() if b is None else b.mul(0.9).add_(g)
            self._b = b
            step[mask] = (g + 0.9 * b) * 0.7
            return theta.detach().clone().sub_(step)
    else:
        raise SystemExit(kind)
    step[mask] = aggregate[mask] * dlr
    return theta.detach().clone().sub_(step)

from p2p_guard.training import error_feedback as ef_mod
RAW, SENT = [], []
_compress = ef_mod.ErrorFeedback.compress
def compress(self, delta):
    payload, sent = _compress(self, delta)
    RAW.append(delta.detach().float().clone()); SENT.append(sent.clone())
    return payload, sent
ef_mod.ErrorFeedback.compress = compress
def diag(self, aggregate, alpha):
    mask = self.dense[0]
    raw = torch.stack(RAW[-8:]).mean(0); sent = torch.stack(SENT[-8:])
    RAW.clear(); SENT.clear()
    t = ~mask
    m, a = raw[t], aggregate[t] * alpha
    cos = float(torch.nn.functional.cosine_similarity(m, a, dim=0))
    count = (sent[:, t] != 0).sum(0)
    print(f"diag cos(alpha*agg, meanDelta)={cos:.3f} |alpha*agg|/|meanDelta|={float(a.norm()/m.norm()):.3f} "
          f"sent-by-any={float((count > 0).float().mean()):.3f} single={float((count == 1).sum() / (count > 0).sum()):.3f} "
          f"|meanDelta|={float(m.norm()):.4g}", flush=True)
EFS = []  # the workers' ErrorFeedback objects, in worker order (agree)
if kind == "agree":  # a coordinate sent by one worker only enters the mean with weight W1; its sender keeps
    (w1,) = par      # the rest, (1 - W1)·s, in its residual (error feedback of what the aggregate applied)
    _cmp = ef_mod.ErrorFeedback.compress
    def compress_agree(self, delta):
        if len(EFS) < 8:
            EFS.append(self)
        return _cmp(self, delta)
    ef_mod.ErrorFeedback.compress = compress_agree
    def apply_agree(self, peers, decoded, r):
        rows = torch.stack(decoded)
        single = (rows != 0).sum(0) == 1
        keep = rows * single * (1 - w1)
        for i, fb in enumerate(EFS):
            fb.residual = fb.residual + keep[i]
        aggregate = (rows - keep).mean(dim=0)
        self.known_previous = decoded
        for local in peers:
            local.apply(aggregate)
    wire._Rounds.apply = apply_agree
AGREED = []  # bias: the sign the previous round's rows agree on (|net vote| >= 2), else 0
if kind == "bias":  # the sender picks its top-k by |a|·(1 + G·[sign(a) = the previous round's agreed sign]) and
    (gain,) = par    # sends a's own values there (receivers unchanged)
    from p2p_guard.protocol import decode_update, encode_update
    def compress_bias(self, delta):
        flat = delta.detach().float()
        target = flat + self.residual * self.decay
        if AGREED:
            weight = 1 + gain * (torch.sign(target) == AGREED[0]).float() * (AGREED[0] != 0).float()
            picked = decode_update(encode_update(target * weight, self.codec, self.shapes), self.codec,
                                   self.numel, self.shapes) != 0
            target_sent = torch.where(picked, target, torch.zeros_like(target))
        else:
            target_sent = target
        payload = encode_update(target_sent, self.codec, self.shapes)
        sent = decode_update(payload, self.codec, self.numel, self.shapes)
        self.residual = target - sent
        RAW.append(flat.clone()); SENT.append(sent.clone())
        return payload, sent
    ef_mod.ErrorFeedback.compress = compress_bias
    _apply = wire._Rounds.apply
    def apply_bias(self, peers, decoded, r):
        vote = torch.sign(torch.stack(decoded)).sum(0)
        AGREED[:] = [torch.sign(vote) * (vote.abs() >= 2).float()]
        return _apply(self, peers, decoded, r)
    wire._Rounds.apply = apply_bias
if kind == "exact":  # the codec's coordinates, but their exact float32 values instead of the two 2-bit levels
    from p2p_guard.protocol import decode_update, encode_update
    EXACT = {}       # payload -> the exact row it stands for (receivers in the run get that row)
    def compress_exact(self, delta):
        flat = delta.detach().float()
        target = flat + self.residual * self.decay
        payload = encode_update(target, self.codec, self.shapes)
        sent = torch.where(decode_update(payload, self.codec, self.numel, self.shapes) != 0, target,
                           torch.zeros_like(target))
        self.residual = target - sent
        RAW.append(flat.clone()); SENT.append(sent.clone())
        EXACT[payload] = sent
        return payload, sent
    ef_mod.ErrorFeedback.compress = compress_exact
    def decode_exact(payload, *args):
        return EXACT.pop(payload).clone()
    wire.decode_update = decode_exact
_q = wire._quality_of
def quality_of(metrics):
    out = _q(metrics)
    print(f"EVAL after round {FIRST and 0} {out[0]} {out[1]:.4f}", flush=True)
    return out
wire._quality_of = quality_of
FIRST = []
T0 = time.time()
outer_mod.OuterNesterov.step = step
t = time.time()
row = wire.convergence([codec], task="shakespeare", rounds=rounds, seed=seed, eval_every=10,
                       progress=lambda s: print(s, flush=True))[0]
curve = " ".join(f"{r}:{q:.4f}" for r, q in row["curve"])
print(f"RESULT {variant} {codec} seed {seed}: {curve}; {row['bytes_per_param']:.4f} B/param; {time.time()-t:.0f} s",
      flush=True)
