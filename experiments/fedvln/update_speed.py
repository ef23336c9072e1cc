"""Speed of one FedVLN follower update (Envdrop's mixed objective, batch 32) on this CPU:
today's update against the same update with the mixed objective as two rollouts, in the same
run.

    python -m experiments.fedvln.update_speed [--updates 20] [--batch 32] [--compile]

Variants, each timed on the same batches from the embedded houses after 3 warm-up updates, one
thread unless said, interleaved `--repeats` times (the median is kept):
  two rollouts (before)           the mixed objective as two rollouts of today's
                                  training/vln_agent.rollout (imitation, then A2C)
  both rollouts in one batch (now)
                                  training/vln_agent.mixed_rollout: the two rollouts of one
                                  update decoded as one batch of 2B rows (same losses, checked
                                  here and in tests/test_vln_models.py)
  now, 2 threads                  client-threads=2: only worth it where a core is free (a run
                                  with one ClientApp per core has none)
  now, compiled decoder           torch.compile of the per-step decoder (--compile; needs a C++
                                  compiler, and pays its compile time once per process)

Every variant runs today's code: no copy of an older implementation is kept here, since a copy
does not follow fixes to the real one (issue 66). The older changes of issue 18 (the rollout
decoding only the episodes still running, dropout drawn as `uniform >= p`, the step-by-step
encoder, multiply-sum attention) were timed against copies of the code as it was; those
scripts and their CSVs are in git (commit 3a56fb1 for the rollout, commit 22d5c20 for the
others: experiments/fedvln/update_speed.py, experiments/results/vln_update_speed.csv), and
docs/performance.md keeps their numbers as history; the step-by-step encoder's equality with
nn.LSTM is a test (tests/test_vln_models.py).
Writes experiments/results/vln_update_speed.csv: updates/s (median) and the ratio to the
(before) row within each repeat: its median, least and largest, so the run-to-run spread stands
beside the ratio.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pandas as pd
import torch

from experiments.simulate import RESULTS, command_line, machine_label


def two_rollouts(roll):
    """The mixed objective as two rollouts of `roll` (imitation, then A2C), as it was before
    training/vln_agent.mixed_rollout decoded both in one batch."""

    def mixed(model, world, episodes, tokens, s, *, token_ids=None, drop=None):
        kw = {"token_ids": token_ids, "drop": drop}
        teacher, _ = roll(model, world, episodes, tokens, "teacher", s, **kw)
        rl, _ = roll(model, world, episodes, tokens, "sample", s, **kw)
        return teacher, rl

    return mixed


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


def same_rollouts(vln, batch: int) -> bool:
    """The one-batch mixed rollout gives two rollouts' teacher and A2C losses (eval mode, so no
    dropout draws differ; sampling made the argmax, so no action draws differ)."""
    from unittest import mock

    from models.envdrop import Follower, FollowerSize
    from training import vln_agent

    torch.manual_seed(0)
    model = Follower(FollowerSize(len(vln.vocab), vln.world.feature_dim)).eval()
    s = vln_agent.AgentSettings(batch_size=batch)
    tokens = vln_agent.Tokens(vln.vocab, s.max_words)
    eps = vln.split("train")[:batch]
    argmax = mock.patch.object(
        torch.distributions.Categorical, "sample", lambda d, shape=(): d.logits.argmax(-1)
    )
    with torch.no_grad(), argmax:
        teacher, _ = vln_agent.rollout(model, vln.world, eps, tokens, "teacher", s)
        a2c, _ = vln_agent.rollout(model, vln.world, eps, tokens, "sample", s)
        joint = vln_agent.mixed_rollout(model, vln.world, eps, tokens, s)
    return torch.allclose(joint[0], teacher, rtol=1e-5) and torch.allclose(joint[1], a2c, rtol=1e-5)


def main(argv=None) -> int:
    from envs.vln_setup import open_vln
    from training import vln_agent

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--compile", action="store_true", help="also time a compiled decoder")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved timings (median kept)")
    args = ap.parse_args(argv)
    cmd = command_line(__file__, argv)
    vln = open_vln("")
    if not same_rollouts(vln, args.batch):
        print("vln_update_speed: the one-batch rollout differs", file=sys.stderr)
        return 1
    joint, two = vln_agent.mixed_rollout, two_rollouts(vln_agent.rollout)
    variants = [  # (name, the mixed objective's rollouts, threads)
        ("two rollouts (before)", two, 1),
        ("both rollouts in one batch (now)", joint, 1),
        ("now, 2 threads", joint, 2),
    ]
    if args.compile:
        variants.append(("now, compiled decoder", joint, 1))
    rows = []
    for k in range(args.repeats):  # interleaved, so a load change hits every variant alike
        for name, mixed, threads in variants:
            vln_agent.mixed_rollout = mixed
            compiled = name == "now, compiled decoder"
            rate = time_updates(vln, args.updates, args.batch, threads, compiled)
            rows.append({"variant": name, "repeat": k, "updates_per_s": rate, "batch": args.batch})
            print(rows[-1], flush=True)
    vln_agent.mixed_rollout = joint
    runs = pd.DataFrame(rows)
    before = runs[runs.variant.str.endswith("(before)")].set_index("repeat").updates_per_s
    runs["ratio"] = runs.updates_per_s / runs.repeat.map(before)  # within one repeat
    df = (
        runs.groupby("variant", sort=False)
        .agg(
            updates_per_s=("updates_per_s", "median"),
            batch=("batch", "first"),
            ratio_to_before=("ratio", "median"),
            ratio_min=("ratio", "min"),
            ratio_max=("ratio", "max"),
        )
        .reset_index()
        .round(3)
    )
    df["repeats"] = args.repeats
    df["machine"] = machine_label()
    RESULTS.mkdir(parents=True, exist_ok=True)
    df.to_csv(RESULTS / "vln_update_speed.csv", index=False)
    print(f"\n{cmd}\n" + df.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
