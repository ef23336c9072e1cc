"""Speed of one FedVLN follower update (Envdrop's mixed objective, batch 32) on this CPU:
today's code against faster variants, in the same run.

    python -m experiments.vln_update_speed [--updates 20] [--batch 32] [--compile]

Variants, each timed on the same batches from the embedded houses after 3 warm-up updates:
  bmm attention, 1 thread        the earlier code (SoftDotAttention with torch.bmm)
  multiply-sum attention, 1 thread   models/envdrop.py now (same values, checked here)
  ... 2 threads                  client-threads=2: only worth it where a core is free (a run
                                 with one ClientApp per core has none)
  ... compiled decoder           torch.compile of the per-step decoder (--compile; needs a C++
                                 compiler, and pays its compile time once per process)
The rollout already stops when every episode of the batch has ended (training/vln_agent.py).
Writes experiments/results/vln_update_speed.csv: updates/s and the ratio to the first row.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np
import pandas as pd
import torch

from experiments.simulate import RESULTS, command_line


def bmm_forward(self, h, ctx, mask=None):
    """SoftDotAttention.forward as it was (batched matrix products)."""
    logit = torch.bmm(ctx, self.linear_in(h).unsqueeze(2)).squeeze(2)
    if mask is not None:
        logit = logit.masked_fill(~mask, float("-inf"))
    attn = torch.softmax(logit, dim=1)
    weighted = torch.bmm(attn.unsqueeze(1), ctx).squeeze(1)
    if self.linear_out is None:
        return weighted, attn, logit
    return torch.tanh(self.linear_out(torch.cat([weighted, h], 1))), attn, logit


def time_updates(vln, updates: int, batch: int, threads: int, compiled: bool) -> float:
    from models.envdrop import Follower, FollowerSize
    from training import vln_agent

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Follower(FollowerSize(len(vln.vocab), vln.world.feature_dim))
    if compiled:
        model.decoder = torch.compile(model.decoder)
    s = vln_agent.AgentSettings(batch_size=batch)
    tokens = vln_agent.Tokens(vln.vocab, s.max_words)
    opt = torch.optim.RMSprop(model.parameters(), lr=s.lr)
    eps = vln.split("train")
    vln_agent.train_batches(
        model, opt, vln.world, eps, tokens, s, iterations=3, rng=np.random.default_rng(0)
    )
    t0 = time.perf_counter()
    vln_agent.train_batches(
        model, opt, vln.world, eps, tokens, s, iterations=updates, rng=np.random.default_rng(1)
    )
    return updates / (time.perf_counter() - t0)


def same_values() -> bool:
    from models.envdrop import SoftDotAttention

    torch.manual_seed(0)
    att = SoftDotAttention(16, 24)
    h, ctx = torch.randn(5, 16), torch.randn(5, 7, 24)
    mask = torch.rand(5, 7) > 0.2
    mask[:, 0] = True
    return all(
        torch.allclose(a, b, atol=1e-6)
        for a, b in zip(att(h, ctx, mask), bmm_forward(att, h, ctx, mask))
    )


def main(argv=None) -> int:
    from envs.vln_setup import open_vln
    from models.envdrop import SoftDotAttention

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--compile", action="store_true", help="also time a compiled decoder")
    args = ap.parse_args(argv)
    cmd = command_line(__file__, argv)
    if not same_values():
        print("vln_update_speed: multiply-sum attention differs from bmm", file=sys.stderr)
        return 1
    vln = open_vln("")
    new_forward = SoftDotAttention.forward
    variants = [
        ("bmm attention, 1 thread (before)", bmm_forward, 1, False),
        ("multiply-sum attention, 1 thread", new_forward, 1, False),
        ("multiply-sum attention, 2 threads", new_forward, 2, False),
    ]
    if args.compile:
        variants.append(
            ("multiply-sum attention, compiled decoder, 1 thread", new_forward, 1, True)
        )
    rows = []
    for name, forward, threads, compiled in variants:
        SoftDotAttention.forward = forward
        rate = time_updates(vln, args.updates, args.batch, threads, compiled)
        rows.append({"variant": name, "updates_per_s": round(rate, 3), "batch": args.batch})
        print(rows[-1], flush=True)
    SoftDotAttention.forward = new_forward
    df = pd.DataFrame(rows)
    df["ratio_to_before"] = (df.updates_per_s / df.updates_per_s.iloc[0]).round(3)
    df["machine"] = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    RESULTS.mkdir(parents=True, exist_ok=True)
    df.to_csv(RESULTS / "vln_update_speed.csv", index=False)
    print(f"\n{cmd}\n" + df.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
