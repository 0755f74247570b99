"""Forward and forward+backward time of one covariant attention head (seed 003) per Wilson-line
mode, side by side with plain softmax attention of the same size.

    python -m benchmarks.covariant_head                      # 256 queries, 64 entries, d_k = 32
    python -m benchmarks.covariant_head --layout shared      # only the planning layout

Layouts: "shared" = one context bank for the whole batch (planning: the bank is fixed for a plan,
so it costs N Wilson lines + one per query; the "prepared bank" rows time the forward pass with
the bank transported beforehand, i.e. the cost per rollout step); "per-sample" = a bank per
query (B x N lines).
Plain attention is W_O softmax(QK^T / sqrt(d_k)) V with the same feature sizes, the same bank
layout and torch's scaled_dot_product_attention. Variants are timed round-robin, in one process,
so machine load hits them alike, and the best round is reported (load only ever adds time);
read ratios, not absolute times (the machine is shared).
By default torch runs one intra-op thread: with other jobs on the 2 cores, a second thread mostly
waits, and tiny kernels then take 10-100x longer at random.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

from world_model.attention.context import ContextBank
from world_model.attention.covariant import (
    CovariantAttention,
    CovariantAttentionConfig,
    CovariantQueries,
    HeadOptions,
)


class PlainAttention(nn.Module):
    """W_O softmax(W_Q x (W_K x_k)^T / sqrt(d_k)) W_V x_v: the degenerate limit, written plainly."""

    def __init__(self, d_query: int, d_key: int, d_value: int, d_k: int, d_out: int):
        super().__init__()
        self.w_q = nn.Linear(d_query, d_k, bias=False)
        self.w_k = nn.Linear(d_key, d_k, bias=False)
        self.w_v = nn.Linear(d_value, d_k, bias=False)
        self.w_o = nn.Linear(d_k, d_out, bias=False)

    def forward(self, x: torch.Tensor, x_k: torch.Tensor, x_v: torch.Tensor) -> torch.Tensor:
        q = self.w_q(x).unsqueeze(-2)  # [B, 1, d_k]
        k, v = self.w_k(x_k), self.w_v(x_v)  # [Bc, N, d_k]
        if k.shape[0] != q.shape[0]:
            k, v = k.expand(q.shape[0], -1, -1), v.expand(q.shape[0], -1, -1)
        return self.w_o(F.scaled_dot_product_attention(q, k, v).squeeze(-2))


def _ball(n: tuple[int, ...], d: int, gen: torch.Generator, device) -> torch.Tensor:
    x = torch.randn(*n, d, generator=gen)
    r = 0.9 * torch.rand(*n, 1, generator=gen)
    return (r * x / x.norm(dim=-1, keepdim=True)).to(device)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=256, help="queries (one per batch element)")
    p.add_argument("--entries", type=int, default=64, help="context entries N")
    p.add_argument("--d-k", type=int, default=32, help="gauge feature size of Q, K, V")
    p.add_argument("--d", type=int, default=8, help="ball dimension of positions")
    p.add_argument("--features", type=int, default=32, help="query / key / value feature size")
    p.add_argument(
        "--segments",
        type=int,
        default=32,
        help="path-ordered segments (32: the head's standalone default before HeadOptions took "
        "the world model's 8; the tables here were measured with 32)",
    )
    p.add_argument("--repeats", type=int, default=7, help="timed rounds (best reported)")
    p.add_argument("--layout", choices=["shared", "per-sample", "both"], default="both")
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--torch-threads",
        choices=["1", "default"],
        default="1",
        help="CPU: 1 intra-op thread (stable on a shared machine) or torch's default",
    )
    args = p.parse_args(argv)
    if args.torch_threads == "1":
        torch.set_num_threads(1)  # never k >= 2 here (PyTorch issue 142815)
    for name in ("batch", "entries", "d_k", "d", "features", "segments", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.d_k % 8:
        p.error("--d-k must be a multiple of 8 (4 x n_colors with n_colors = 2)")
    device = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)
    b, n, f, d = args.batch, args.entries, args.features, args.d
    layouts = ["shared", "per-sample"] if args.layout == "both" else [args.layout]

    queries = CovariantQueries(
        _ball((b,), d, gen, device),
        torch.randn(b, f, generator=gen).to(device),
        velocity=(0.3 * torch.randn(b, d, generator=gen)).to(device),
        value_grad=torch.randn(b, d, generator=gen).to(device),
        levels=torch.zeros(b, dtype=torch.long, device=device),
    )
    banks = {}
    for layout in layouts:
        bc = 1 if layout == "shared" else b
        banks[layout] = ContextBank(
            _ball((bc, n), d, gen, device),
            torch.randn(bc, n, f, generator=gen).to(device),
            torch.randn(bc, n, f, generator=gen).to(device),
            torch.randint(0, 2, (bc, n), generator=gen).to(device),
        )

    variants = {}
    plain = PlainAttention(f, f, f, args.d_k, f).to(device)
    for layout in layouts:
        bank = banks[layout]
        variants[("plain softmax", layout)] = (
            plain,
            lambda m=plain, bk=bank: m(queries.features, bk.key_features, bk.value_features),
        )
        for mode in ("first_order", "exp", "path_ordered"):
            options = HeadOptions(  # chirality 1: the standalone default these were measured at
                d_k=args.d_k, wilson=mode, segments=args.segments, chirality=1.0
            )
            cfg = CovariantAttentionConfig(
                d=d, d_query=f, d_key=f, d_value=f, d_out=f, options=options
            )
            torch.manual_seed(0)
            head = CovariantAttention(cfg).to(device)
            variants[(f"covariant {mode}", layout)] = (
                head,
                lambda m=head, bk=bank: m(queries, bk)[0],
            )
            if layout == "shared":  # planning: the bank is transported once per plan
                with torch.no_grad():
                    prepared = head.prepare(bank)
                variants[(f"covariant {mode}, prepared bank", layout)] = (
                    head,
                    lambda m=head, pc=prepared: m(queries, pc)[0],
                )

    def run(module, fn, backward: bool) -> float:
        module.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        if backward:
            fn().square().mean().backward()
        else:
            with torch.no_grad():
                fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    times: dict[tuple[tuple[str, str], bool], list[float]] = {}

    def backward_ok(key: tuple[str, str]) -> bool:
        return "prepared" not in key[0]  # planning needs no gradient through a fixed bank

    for key, (module, fn) in variants.items():  # warm-up
        run(module, fn, backward_ok(key))
    for _ in range(args.repeats):
        for key, (module, fn) in variants.items():
            for backward in (False, True) if backward_ok(key) else (False,):
                times.setdefault((key, backward), []).append(run(module, fn, backward))

    print(
        f"# covariant head: {b} queries x {n} entries, d_k = {args.d_k}, d = {d}, features {f}, "
        f"path-ordered segments {args.segments}, device {device}, "
        f"torch threads {torch.get_num_threads()}, best of {args.repeats} rounds"
    )
    print("| variant | bank layout | forward ms | fwd+bwd ms | fwd ratio | fwd+bwd ratio |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for layout in layouts:
        base_f = min(times[(("plain softmax", layout), False)])
        base_b = min(times[(("plain softmax", layout), True)])
        for key in variants:
            if key[1] != layout:
                continue
            tf = min(times[(key, False)])
            if backward_ok(key):
                tb = min(times[(key, True)])
                back = f"{1e3 * tb:.2f} | {tf / base_f:.1f}x | {tb / base_b:.1f}x"
            else:
                back = f"- | {tf / base_f:.1f}x | -"
            print(f"| {key[0]} | {layout} | {1e3 * tf:.2f} | {back} |")


if __name__ == "__main__":
    main()
