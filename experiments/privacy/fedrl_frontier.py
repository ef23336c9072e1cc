"""FedRL's privacy-utility frontier at the Table-1 budget: test SuccRate against the run's
epsilon over sigma, with DQN-alpha (alpha alone, nothing shared) and the random policies as
lines (issue 44 item 3). The analysis of the study file experiments/studies/fedrl_frontier.toml:

    python -m experiments.study experiments/studies/fedrl_frontier.toml

The runs are Table 1's (experiments/fedrl/table1.py: the same maps and split, the paper's
rules, 8x8, 200 rounds as docs/fedrl.md's Table 1, model selection, run cache and resume); only
`fedrl.sigma` changes, the std of the Gaussian noise on every released Q output
(Eq. 1-2, `training.fedrl_privacy.release`). sigma = 0 is the undefended point
(`fedrl.insecure-no-noise`, epsilon infinite). DQN-alpha and the floors release nothing and do
not depend on sigma: trained once per seed, epsilon 0.

Epsilon is each party's own ledger at the end of the run (`Party.privacy`: RDP composition over
the releases of its most-released transition, delta 1e-5); the x axis is the larger of alpha's
and beta's, the weaker guarantee of the two. FedRL is scored with test_noise=on, the paper's
FedRL-1: at test time the parties still release noised outputs, so the score is that of the
protected run.

"Beats DQN-alpha" is the paired difference FedRL(sigma, seed) - DQN-alpha(seed) over seeds with
its 95% interval, the sd floored at the binomial sd of two SuccRates over the test maps
(`experiments.tables.paired`): FedRL beats DQN-alpha at a sigma when the interval lies
above 0. `crossing` names the largest sigma (smallest epsilon) at which it still does.

Writes experiments/results/<name>.csv (one row per sigma or baseline and checkpoint, the paper's
number beside), <name>_runs.csv (one row per run) and <name>.png.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from experiments import figures
from experiments.fedrl.table1 import PAPER
from experiments.tables import (
    epsilon_text,
    mean_sd,
    paired,
    pipe_table,
)

BASELINES = {
    "dqn-alpha": "DQN-alpha (α alone)",
    "random-both": "random α and β",
    "random-alpha": "random α, β stays",
}
# the paper's 8x8 SuccRate %: FedRL at its sigma = 1 (FedRL-1 / FedRL-2 as printed), DQN-alpha
PAPER_FEDRL = f"{PAPER[('fedrl-1', 'succ')][0]:g} / {PAPER[('fedrl-2', 'succ')][0]:g}"
PAPER_DQN = PAPER[("dqn-alpha", "succ")][0]


def scored(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (method, sigma, seed, checkpoint): SuccRate % (FedRL with test_noise=on), the
    number of test maps it was scored on and the run's epsilon (the larger party's; 0 for a
    method that releases nothing)."""
    r = runs[(runs.method != "fedrl") | (runs.test_noise == "on")].copy()
    r["succ"] = 100.0 * r.succ_rate
    r["episodes"] = [json.loads(m).get(s, 0) for m, s in zip(r.maps_used, r.split)]
    fed = r.method == "fedrl"
    r["epsilon"] = np.where(fed, np.maximum(r.eps_alpha, r.eps_beta), 0.0)
    r["sigma"] = np.where(fed, r["sigma"], np.nan)
    return r


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per sigma and checkpoint: epsilon, SuccRate mean ± sd, and FedRL - DQN-alpha paired over
    seeds; then the baselines' rows."""
    r = scored(runs)
    rows = []
    for ck in ("best", "last"):
        at = r[r.checkpoint == ck]
        dqn = at[at.method == "dqn-alpha"]
        dqn_by_seed = dict(zip(dqn.seed, zip(dqn.succ, dqn.episodes)))
        for sigma, g in at[at.method == "fedrl"].groupby("sigma", sort=True):
            pair = paired(dict(zip(g.seed, zip(g.succ, g.episodes))), dqn_by_seed) or {}
            low, high = pair.get("low", np.nan), pair.get("high", np.nan)
            rows.append(
                {
                    "method": "fedrl",
                    "sigma": sigma,
                    "checkpoint": ck,
                    "seeds": len(g),
                    "eps_alpha": g.eps_alpha.mean(),
                    "eps_beta": g.eps_beta.mean(),
                    "epsilon": g.epsilon.mean(),
                    "succ": mean_sd(g.succ),
                    "succ_mean": g.succ.mean(),
                    "succ_sd": g.succ.std(ddof=1) if len(g) > 1 else 0.0,
                    "vs_dqn_alpha": pair.get("gain", np.nan),
                    "vs_low": low,
                    "vs_high": high,
                    "beats_dqn_alpha": bool(low > 0),
                    "vs_by_seed": pair.get("by_seed", ""),
                    "paper": PAPER_FEDRL if sigma == 1 else "",
                }
            )
        for m, label in BASELINES.items():
            g = at[at.method == m]
            if len(g):
                rows.append(
                    {
                        "method": m,
                        "sigma": np.nan,
                        "checkpoint": ck,
                        "seeds": len(g),
                        "eps_alpha": 0.0,
                        "eps_beta": 0.0,
                        "epsilon": 0.0,
                        "succ": mean_sd(g.succ),
                        "succ_mean": g.succ.mean(),
                        "succ_sd": g.succ.std(ddof=1) if len(g) > 1 else 0.0,
                        "paper": f"{PAPER_DQN:g}" if m == "dqn-alpha" else "",
                    }
                )
    return pd.DataFrame(rows)


def crossing(t: pd.DataFrame, checkpoint: str = "best") -> dict:
    """Where FedRL stops beating DQN-alpha (interval above 0): the largest sigma at which it
    still does, the smallest above that at which it no longer does, with their epsilons, and
    every smaller sigma that does not beat it (the curve need not be monotone: one seed's
    checkpoint can sink a low sigma). None where there is none."""
    f = t[(t.method == "fedrl") & (t.checkpoint == checkpoint) & (t.sigma > 0)].sort_values("sigma")
    won = f.beats_dqn_alpha.astype(bool)
    last = f[won].iloc[-1] if won.any() else None
    above = f[(f.sigma > last.sigma) & ~won] if last is not None else f[~won]
    first_not = above.iloc[0] if len(above) else None
    return {
        "last_sigma": None if last is None else float(last.sigma),
        "last_epsilon": None if last is None else float(last.epsilon),
        "first_not_sigma": None if first_not is None else float(first_not.sigma),
        "first_not_epsilon": None if first_not is None else float(first_not.epsilon),
        "beats": [float(x) for x in f[won].sigma],
        "not_below": [float(x) for x in f[~won].sigma if last is not None and x < last.sigma],
    }


def markdown(t: pd.DataFrame) -> str:
    head = [
        "setting",
        "checkpoint",
        "seeds",
        "ε (α / β), δ = 1e-5",
        "test SuccRate %",
        "− DQN-alpha [95%]",
        "by seed",
        "paper",
    ]
    body = []
    for r in t.itertuples():
        if r.method == "fedrl":
            name = f"FedRL σ = {r.sigma:g}" + (" (paper's)" if r.sigma == 1 else "")
            eps = f"{epsilon_text(r.eps_alpha)} / {epsilon_text(r.eps_beta)}"
            vs = f"{r.vs_dqn_alpha:+.1f} [{r.vs_low:+.1f}, {r.vs_high:+.1f}]"
            by = r.vs_by_seed
        else:
            name, eps, vs, by = BASELINES[r.method], "0 (releases nothing)", "", ""
        paper = r.paper if isinstance(r.paper, str) else ""  # read back from the CSV: NaN
        body.append([name, r.checkpoint, int(r.seeds), eps, r.succ, vs, by, paper])
    c = crossing(t)
    if c["last_sigma"] is None:
        said = "FedRL beats DQN-alpha at no σ > 0 measured (best checkpoint)."
    else:
        listed = ", ".join(f"{x:g}" for x in c["beats"])
        said = (
            f"FedRL beats DQN-alpha (interval above 0, best checkpoint) at σ = {listed}, up "
            f"to σ = {c['last_sigma']:g} (ε = {epsilon_text(c['last_epsilon'])}, the larger party's)"
            + (
                f" (not at σ = {', '.join(f'{x:g}' for x in c['not_below'])})"
                if c["not_below"]
                else ""
            )
            + (
                f"; from σ = {c['first_not_sigma']:g} (ε = {epsilon_text(c['first_not_epsilon'])}) it "
                "no longer does."
                if c["first_not_sigma"] is not None
                else ", the largest σ measured."
            )
        )
    return pipe_table(head, body) + "\n\n" + said


def plot(runs: pd.DataFrame, png, command: str) -> None:
    t = summarize(runs)
    fig, axes = figures.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, ck in zip(axes, ("best", "last")):
        f = t[(t.method == "fedrl") & (t.checkpoint == ck)].sort_values("epsilon")
        finite = f[np.isfinite(f.epsilon)]
        right = finite.epsilon.max() * 10 if len(finite) else 1.0
        x = np.where(np.isfinite(f.epsilon), f.epsilon, right)
        ax.errorbar(x, f.succ_mean, yerr=f.succ_sd, fmt="o-", capsize=3, label="FedRL (ours)")
        for xi, y, s in zip(x, f.succ_mean, f.sigma):
            ax.annotate(f"σ={s:g}", (xi, y), textcoords="offset points", xytext=(3, 5), fontsize=7)
        for m, style in (("dqn-alpha", "-"), ("random-both", "--"), ("random-alpha", ":")):
            b = t[(t.method == m) & (t.checkpoint == ck)]
            if len(b):
                y, sd = float(b.succ_mean.iloc[0]), float(b.succ_sd.iloc[0])
                ax.axhline(y, color="grey" if m != "dqn-alpha" else "C1", ls=style,
                           label=f"{BASELINES[m]} (ours, ε = 0)")  # fmt: skip
                if m == "dqn-alpha":
                    ax.axhspan(y - sd, y + sd, color="C1", alpha=0.12)
        ax.axhline(PAPER_DQN, color="C1", ls="-.", lw=1, label=f"DQN-alpha paper {PAPER_DQN:g}")
        one = f[f.sigma == 1]
        if len(one):
            for v in PAPER_FEDRL.split(" / "):
                ax.plot(one.epsilon, [float(v)], "r*", ms=9)
            ax.plot([], [], "r*", label=f"FedRL paper at σ = 1: {PAPER_FEDRL} (at our ε for σ = 1)")
        ax.set(xscale="log", title=f"8x8, paper rules, {ck} checkpoint",
               xlabel="ε of the run (larger party's, δ = 1e-5); σ = 0 (ε = ∞) drawn at the right")  # fmt: skip
        if not np.isfinite(f.epsilon).all():
            ax.annotate("ε = ∞", (right, 0), xycoords=("data", "axes fraction"), ha="center",
                        va="bottom", fontsize=7)  # fmt: skip
        ax.set_ylabel(f"test SuccRate % (mean ± sd, {int(t.seeds.max())} seeds)")
        ax.legend(fontsize=6)
    fig.tight_layout()
    figures.save(fig, png, command)
