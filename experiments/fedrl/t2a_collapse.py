"""Why FedRL collapsed on Text2Action, measured: one change at a time on Table 2's settings.

    python -m experiments.study experiments/studies/fedrl_t2a_collapse.toml [--jobs 2]

(the analysis of that study file, which holds the dataset, folds, rounds and variants).

Table 2's FedRL with the paper's 4-unit theta_g once collapsed to selecting nothing (F1 0-4) in 5
of 9 runs. Each variant below changes one thing against `before` (Table 2's previous settings:
target networks copied every 5 updates); each runs FedRL on every fold (run seed = fold) for
`rounds` rounds, and records the valid F1 every 10 rounds and, at the end, on 512 replay
states: how many of theta_g's hidden ReLU units are dead (never positive) and the largest
|Q_hat_alpha| and |Q_hat_beta|. A run `collapsed` if its valid F1 never reached the floor's
(each word selected with probability 1/2, scored on the same valid texts).

Variants (the first four are the issue's hypotheses; the reference is FRL2019/FRL text2action):
- `ref-init`: theta_g initialised as the reference's `linear` (EADQN.py: weights
  N(0, 0.1) truncated at 2 sd, biases 0.1), so its hidden units start alive.
- `prioritised`: the reference's replay (ReplayMemory.py `getMinibatch`, positive_rate 0.9):
  90% of each minibatch from positive-reward transitions. Alpha, who holds the rewards, would
  have to draw the ids; this diagnostic draws them from alpha's replay directly.
- `no-clip`: C = 10^6 instead of 1000, so no release is clipped.
- `mlp32`: theta_g with 32 hidden units.
- `gamma0`: gamma = 0, no bootstrapping (a bandit): isolates the TD target.
- `target1000` / `target100`: target networks copied every 1000 (Table 2's schedule now) / 100
  (the shipped `fedrl.target-update`) updates instead of 5. (The reference's FRL
  mode copies its target networks onto themselves, so its targets never move from their
  random initialisation; its DQN baselines copy every 5 steps.)

`ref-init` and `prioritised` are not run-config keys of the app: this script patches them in
for the measurement. Results: experiments/results/fedrl_t2a_collapse{,_runs}.csv and the
figure; each run is kept in the study's work folder under its fingerprint (the settings, the
corpus, the variant and the FedRL exchange's version), and a rerun skips it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from experiments import figures
from experiments.fedrl import table_runs
from experiments.fedrl.table2 import settings_of
from experiments.simulate import ROOT, cached
from experiments.tables import mean_sd

BEFORE = {"fedrl.target-update": 5}  # Table 2's schedule before this measurement
VARIANTS = {
    "before": {},
    "ref-init": {},
    "prioritised": {},
    "no-clip": {"fedrl.clip": 1e6},
    "mlp32": {"fedrl.mlp-hidden": 32},
    "gamma0": {"fedrl.gamma": 0.0},
    "target1000": {"fedrl.target-update": 1000},
    "target100": {"fedrl.target-update": 100},
}
VERSION = 1  # of this study's measurement


def reference_init(mlp) -> None:
    """The reference's `linear` initialisation (EADQN.py): N(0, 0.1) truncated, bias 0.1."""
    import torch

    with torch.no_grad():
        for lin in (mlp.hidden, *mlp.heads):
            torch.nn.init.trunc_normal_(lin.weight, 0.0, 0.1, -0.2, 0.2)
            lin.bias.fill_(0.1)


def prioritised_ids(alpha, rate: float = 0.9):
    """The reference's getMinibatch: `rate` of each minibatch from positive-reward transitions
    (uniform within each class), drawn from alpha's replay."""

    def sample(rng, transitions: int, s):
        if transitions < max(s.warmup, s.batch_size):
            return None
        ids = np.arange(max(0, transitions - s.replay), transitions)
        r = alpha.replay.get(ids)["r"]
        pos, neg = ids[r > 0], ids[r <= 0]
        n_pos = min(int(rate * s.batch_size), len(pos))
        out = np.empty((s.updates, s.batch_size), np.int64)
        for k in range(s.updates):
            p = rng.choice(pos, n_pos) if n_pos else ids[:0]
            out[k] = np.concatenate([p, rng.choice(neg if len(neg) else ids, s.batch_size - n_pos)])
        return out

    return sample


def job_settings(job: dict):
    return settings_of(
        {
            "method": "fedrl",
            "dataset": job["dataset"],
            "fold": job["fold"],
            "seed": job["fold"],
            "words": job["words"],
            "data": job["data"],
            "extra": {**BEFORE, **VARIANTS[job["variant"]]},
        }
    )


def fingerprint(job: dict) -> str:
    """Table 2's fingerprint of the run (settings, corpus bytes, rounds, the FedRL exchange's
    version and the floating-point kernels) under the variant's name and this study's version."""
    tagged = {**job, "method": f"fedrl-{job['variant']}-v{VERSION}", "eval_every": 10}
    return table_runs.fingerprint(tagged, job_settings(job), "t2a_data", "fedrl")


def check(cell: dict, where) -> None:
    """What a run of this study accepts (experiments/study.py)."""
    if cell["variant"] not in VARIANTS:
        raise ValueError(
            f"{where}: grid.variant: {cell['variant']!r} is not one of {list(VARIANTS)}"
        )
    if cell["rounds"] < 10 or cell["rounds"] % 10:
        raise ValueError(f"{where}: grid.rounds: a positive multiple of 10 (valid every 10)")
    if not (ROOT / cell["data"]).is_dir():
        raise ValueError(f"{where}: grid.data: {cell['data']}: no such directory")


def one_run(
    variant: str, dataset: str, fold: int, rounds: int, words: int, data: str, work: Path
) -> dict:
    """FedRL with one change on one fold, kept in `work` (a rerun with the same fingerprint
    reads it back): its valid F1 every 10 rounds, the floor's, and theta_g's state at the end."""
    job = {"variant": variant, "dataset": dataset, "fold": fold, "rounds": rounds,
           "words": words, "data": str((ROOT / data).resolve())}  # fmt: skip
    from envs.word_vectors import word_vectors

    word_vectors(job["data"])
    path = Path(work) / f"{variant}_{dataset}_f{fold}.json"
    Path(work).mkdir(parents=True, exist_ok=True)

    def describe(rows: list[dict]) -> str:
        r = rows[0]
        return (
            f"  {r['variant']:12s} fold {r['fold']}: valid F1 {r['valid_f1']}, "
            f"{r['dead_units']}/{r['hidden_units']} dead, |Q_alpha| <= {r['max_abs_q_alpha']:.0f}"
        )

    return cached(path, fingerprint(job), lambda: train(job), describe)[0]


def train(job: dict) -> list[dict]:
    import time
    from contextlib import nullcontext
    from unittest import mock

    import torch

    import training.fedrl_protocol as protocol
    from training.fedrl_baselines import make

    torch.set_num_threads(1)
    s = job_settings(job)
    t0 = time.perf_counter()
    floor = make("random-alpha", s).evaluate("valid")["valid-f1"]
    run = protocol.DirectTransport(s)
    alpha, beta = run.alpha, run.beta
    if job["variant"] == "ref-init":
        for party in (alpha, beta):
            reference_init(party.mlp)
            party.mlp_target.load_state_dict(party.mlp.state_dict())
    patch = (  # the orchestrator's uniform draw replaced for this run only
        mock.patch.object(protocol, "sample_ids", prioritised_ids(alpha))
        if job["variant"] == "prioritised"
        else nullcontext()
    )
    f1 = []
    with patch:
        for rnd in range(1, job["rounds"] + 1):
            run.round(rnd % 10 == 0)
            if rnd % 10 == 0:
                f1.append(run.evaluate("valid")["valid-f1-test_noise=on"])
    n = min(alpha.counters["transitions"], s.replay)
    ids = np.random.default_rng(0).integers(0, n, 512)
    with torch.no_grad():
        qa = alpha.q(torch.as_tensor(alpha.replay.get(ids)["s"]))
        qb = beta.q(torch.as_tensor(beta.replay.get(ids)["s"]))
        hidden = alpha.mlp.hidden(torch.cat([qa, qb], 1))
    row = {
        "variant": job["variant"],
        "dataset": job["dataset"],
        "fold": job["fold"],
        "rounds": job["rounds"],
        "valid_f1": json.dumps([round(v, 4) for v in f1]),
        "best_valid_f1": max(f1),
        "last_valid_f1": f1[-1],
        "floor_valid_f1": floor,
        "collapsed": bool(max(f1) < floor),
        "dead_units": int(((hidden > 0).sum(0) == 0).sum()),
        "hidden_units": hidden.shape[1],
        "max_abs_q_alpha": float(qa.abs().max()),
        "max_abs_q_beta": float(qb.abs().max()),
        "wall_s": round(time.perf_counter() - t0, 1),
        "fingerprint": fingerprint(job),
    }
    return [row]


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for v in VARIANTS:
        g = runs[runs.variant == v]
        if len(g):
            rows.append(
                {
                    "variant": v,
                    "runs": len(g),
                    "collapsed": int(g.collapsed.sum()),
                    "best valid F1 %": mean_sd(g.best_valid_f1 * 100),
                    "last valid F1 %": mean_sd(g.last_valid_f1 * 100),
                    "floor valid F1 %": mean_sd(g.floor_valid_f1 * 100),
                    "dead units": f"{g.dead_units.mean():.1f} / {g.hidden_units.iloc[0]}",
                    "max |Q_alpha|": f"{g.max_abs_q_alpha.median():.0f} (median)",
                }
            )
    return pd.DataFrame(rows)


def plot(runs: pd.DataFrame, png: Path, command: str) -> None:
    """Best valid F1 per fold (dots) and its mean (bar) per variant, the floor's mean as a line,
    and how many folds collapsed (below the floor) over each bar. The paper reports no such
    diagnostic; its CT F1 is Table 2's figure."""
    order = [v for v in VARIANTS if v in set(runs["variant"])]
    fig, ax = figures.subplots(figsize=(8, 4))
    for i, v in enumerate(order):
        g = runs[runs["variant"] == v]
        f1 = g["best_valid_f1"] * 100
        ax.bar(i, f1.mean(), 0.6, color="tab:blue", alpha=0.5)
        ax.plot(np.full(len(f1), i), f1, "o", color="tab:blue", ms=4)
        ax.text(i, f1.max() + 2, f"{int(g['collapsed'].sum())}/{len(g)}", ha="center", fontsize=8)
    ax.axhline(runs["floor_valid_f1"].mean() * 100, color="grey", ls="--",
               label="floor: each word selected with p = 1/2")  # fmt: skip
    ax.set_xticks(range(len(order)), order, fontsize=8)
    ax.set(ylabel="best valid F1 %", ylim=(0, 100),
           title="FedRL on Text2Action (CT): one change at a time; collapsed folds over each bar")  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    figures.save(fig, png, command)
