"""Inner-phase time of a task on CUDA (bf16 autocast on and off) and on the CPU: seconds per inner step and per H.

    python docs/scripts/inner_step_timing.py                      # the ~25M-parameter char-GPT, two contexts
    python docs/scripts/inner_step_timing.py --spec digits --extra-spec "" --cpu-steps 20

Each row builds the task's model, runs a few warm-up steps, then times ``--gpu-steps`` (CUDA) or ``--cpu-steps``
(CPU) inner AdamW steps with ``p2p_guard.training.inner.run_inner_steps`` on shard 0 of 4 (IID) and prints a
Markdown table; ``--json`` keeps the rows. Exit 1 if a parameter ended non-finite or not float32.

Measured 2026-12-04 on a lent NVIDIA H200 (torch 2.11.0+cu130, 16 CPU cores; the issue-10 GPU check), batch 16,
H = 50, ``shakespeare:n_layers=8,d_model=512,n_heads=8`` (d = 25,338,880):

| context | device | autocast | s/step | s per H | max GPU memory |
|---|---|---|---|---|---|
| default | cuda | bf16 | 0.0226 | 1.13 | 0.56 GiB |
| default | cuda | off | 0.0180 | 0.90 | 0.62 GiB |
| default | cpu (16 threads) | off | 0.31 (3 steps) | 15.6 | - |
| 256 | cuda | bf16 | 0.0261 | 1.30 | 1.04 GiB |
| 256 | cuda | off | 0.0214 | 1.07 | 1.42 GiB |

At this size bf16 autocast is about 25 % slower than float32 (the casts cost more than the matrix products
save at batch 16) and saves some memory; the loss after the timed steps was the same to three decimals.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from p2p_guard.tasks import load_task
from p2p_guard.training.inner import autocast_dtype, make_inner_optimizer, run_inner_steps


def bench(task, shard, device: str, bf16: bool, steps: int, warmup: int) -> dict:
    model = task.build_model(0).to(device)
    d = sum(p.numel() for p in model.parameters())
    opt = make_inner_optimizer(model, task)
    gen = torch.Generator().manual_seed(1)
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    first = run_inner_steps(model, task, shard, warmup, opt, gen, device, mixed_precision=bf16)
    if device == "cuda":
        torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    loss = run_inner_steps(model, task, shard, steps, opt, gen, device, mixed_precision=bf16)
    if device == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    dtypes = sorted({str(p.dtype) for p in model.parameters()})
    row = {
        "device": device, "autocast": str(autocast_dtype(device, bf16)), "d": d, "warmup_steps": warmup,
        "warmup_s": round(warm_s, 3), "timed_steps": steps, "s_per_step": dt / steps,
        "s_per_H": dt / steps * task.default_hparams.inner_steps, "loss_first_warmup": round(first, 4),
        "loss_timed": round(loss, 4), "params_finite": finite, "param_dtypes": dtypes,
    }
    if device == "cuda":
        row["max_mem_GiB"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
    del model, opt
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="shakespeare:n_layers=8,d_model=512,n_heads=8")
    ap.add_argument("--extra-spec", default="shakespeare:n_layers=8,d_model=512,n_heads=8,context=256")
    ap.add_argument("--gpu-steps", type=int, default=50)
    ap.add_argument("--cpu-steps", type=int, default=3)
    ap.add_argument("--no-cuda", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    print(f"torch {torch.__version__}, cuda available {torch.cuda.is_available()}, "
          f"cpu threads {torch.get_num_threads()}, os.cpu_count {os.cpu_count()}", flush=True)
    if torch.cuda.is_available():
        print("gpu:", torch.cuda.get_device_name(0), flush=True)
    rows = []
    cuda = torch.cuda.is_available() and not a.no_cuda
    for spec in [a.spec, a.extra_spec] if a.extra_spec else [a.spec]:
        task = load_task(spec)
        shard = task.shard(4, 0, "iid", 0)
        print(f"{spec}: H = {task.default_hparams.inner_steps}, batch {task.default_hparams.batch_size}",
              flush=True)
        configs = []
        if cuda:
            configs += [("cuda", True, a.gpu_steps, 5), ("cuda", False, a.gpu_steps, 5)]
        if spec == a.spec:
            configs += [("cpu", True, a.cpu_steps, 1)]
        for device, bf16, steps, warmup in configs:
            row = bench(task, shard, device, bf16, steps, warmup)
            row["spec"] = spec
            print(json.dumps(row), flush=True)
            rows.append(row)
    print()
    print(f"| spec | device | autocast | d | s/step | s per H | loss | max GPU mem GiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {(r['spec'].split(':', 1) + ['default'])[1]} | {r['device']} | {r['autocast']} | {r['d']:,} | "
              f"{r['s_per_step']:.4f} | {r['s_per_H']:.3f} | {r['loss_timed']} | {r.get('max_mem_GiB', '-')} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    bad = [r for r in rows if not r["params_finite"] or r["param_dtypes"] != ["torch.float32"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
