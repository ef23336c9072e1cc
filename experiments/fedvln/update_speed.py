"""Speed of one FedVLN follower update (Envdrop's mixed objective, batch 32) on this CPU:
today's update against the same update with the mixed objective as two rollouts, in the same
run.

    python -m experiments.study experiments/studies/vln_update_speed.toml

(the analysis of that study file, which sets the updates, batch, repeats and whether to
compile). The study is one run, so its timings never share the machine with each other,
whatever `--jobs` is.

Variants, each timed on the same batches from the embedded houses after 3 warm-up updates, one
thread unless said, interleaved `repeats` times (the median is kept):
  two rollouts (before)           the mixed objective as two rollouts of today's
                                  training/vln_agent.rollout (imitation, then A2C)
  both rollouts in one batch (now)
                                  training/vln_agent.mixed_rollout: the two rollouts of one
                                  update decoded as one batch of 2B rows (same losses, checked
                                  here and in tests/test_vln_models.py)
  now, 2 threads                  client-threads=2: only worth it where a core is free (a run
                                  with one ClientApp per core has none)
  now, compiled decoder           torch.compile of the per-step decoder (needs a C++
                                  compiler, and pays its compile time once per process;
                                  `compile-decoder = true` in the study file)

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
beside the ratio; every timing in vln_update_speed_runs.csv, and the figure.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from experiments import figures
from experiments.simulate import machine_label
from experiments.tables import ratio_within_repeat


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


def one_run(updates: int, batch: int, repeats: int, compile_decoder: bool) -> list[dict]:
    """Every variant timed `repeats` times, interleaved so that a change of load hits every
    variant alike; refuses if the one-batch rollout's losses differ from two rollouts'."""
    from envs.vln_setup import open_vln
    from training import vln_agent

    vln = open_vln("")
    if not same_rollouts(vln, batch):
        raise RuntimeError("vln_update_speed: the one-batch rollout differs from two rollouts")
    joint, two = vln_agent.mixed_rollout, two_rollouts(vln_agent.rollout)
    variants = [  # (name, the mixed objective's rollouts, threads)
        ("two rollouts (before)", two, 1),
        ("both rollouts in one batch (now)", joint, 1),
        ("now, 2 threads", joint, 2),
    ]
    if compile_decoder:
        variants.append(("now, compiled decoder", joint, 1))
    rows = []
    try:
        for k in range(repeats):
            for name, mixed, threads in variants:
                vln_agent.mixed_rollout = mixed
                compiled = name == "now, compiled decoder"
                rate = time_updates(vln, updates, batch, threads, compiled)
                rows.append({"variant": name, "repeat": k, "updates_per_s": rate, "batch": batch})
                print(rows[-1], flush=True)
    finally:
        vln_agent.mixed_rollout = joint
    return rows


def check(cell: dict, where) -> None:
    """What a run of this study accepts (experiments/study.py)."""
    if min(cell["updates"], cell["batch"], cell["repeats"]) < 1:
        raise ValueError(f"{where}: grid.updates, batch, repeats: at least 1")


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Median updates/s per variant and its ratio to (before) within each repeat."""
    runs = ratio_within_repeat(runs, "updates_per_s", runs.variant.str.endswith("(before)"))
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
    df["repeats"] = runs.repeat.nunique()
    df["machine"] = machine_label()
    return df


def plot(runs: pd.DataFrame, png: Path, command: str) -> None:
    """Each variant's speed as a ratio to two rollouts within the same repeat: the median as a
    bar, every repeat as a dot; 1 (the line) is the (before) row itself."""
    runs = ratio_within_repeat(runs, "updates_per_s", runs.variant.str.endswith("(before)"))
    names = list(dict.fromkeys(runs.variant))
    fig, ax = figures.subplots(figsize=(7, 3.6))
    for i, name in enumerate(names):
        r = runs[runs.variant == name]["ratio"]
        ax.bar(i, r.median(), 0.6, color="tab:blue", alpha=0.5)
        ax.plot(np.full(len(r), i), r, "o", color="tab:blue", ms=4)
    ax.axhline(1.0, color="grey", ls="--", label="two rollouts (before) = 1")
    ax.set_xticks(range(len(names)), [n.replace(" (", "\n(") for n in names], fontsize=8)
    ax.set(ylabel="updates/s ÷ two rollouts' (same repeat)",
           title="One FedVLN follower update (batch 32) on this CPU")  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    figures.save(fig, png, command)
