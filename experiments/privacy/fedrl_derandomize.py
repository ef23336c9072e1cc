"""The adversary who has read our code: can beta (or the server) regenerate alpha's noise and
subtract it? (issue 61)

    python -m experiments.study experiments/studies/fedrl_derandomize.toml

The attacker knows the code, the run config (its seed) and every message it relayed, with its
position in the protocol. It does not know alpha's message counter exactly: it starts from a
guess up to `window` away and, for each release of C_alpha it saw, tries every candidate
count m in the window, regenerating the study mode's noise (`SeededNoise(seed, alpha, m)`),
subtracting it, and keeping the candidate that explains the first 8 releases best: the true
candidate leaves alpha's clipped Q, whose rows never exceed the public clip C, and no extra
energy; any other leaves rows over C and noise of variance 2 sigma^2 on every coordinate. Then
it follows alpha's counter from there. `recovered` is the share of
releases it recovers to float32 rounding (max error < 1e-3).

Per (sigma, seed): FedRL trains `rounds` rounds in study mode (the package's 8x8 defaults,
`DirectTransport`), and then alpha's one trained Q-network releases C_alpha on random walks on
the test maps (experiments/privacy/fedrl_attack.released_pairs) twice: with the study mode's
seeded noise (what every run did before this change) and with its default secret noise (a
256-bit key from os.urandom; training/fedrl_privacy.py). The same network, the same
observations: only the noise source differs. The property attack of fedrl_attack (can beta
read whether each of alpha's four neighbours is blocked; logistic regression, maps disjoint,
ROC AUC, shuffled labels as chance) then reads (a) the noised releases, (b) what the
derandomizer recovered from them, (c) alpha's true un-noised clipped outputs (the attack's
ceiling).

Results: experiments/results/fedrl_derandomize{,_runs}.csv and .png; runs cached in `work`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from experiments import figures
from experiments.fedrl import numerics  # noqa: F401  (pins the floating-point kernels first)
from experiments.tables import (
    mean_sd,
)

ALPHA = 0  # the role number SeededNoise mixes into its seed


def remove_noise(released: np.ndarray, sigma: float, seed: int, m: int) -> np.ndarray:
    """`released` minus the study-mode noise of alpha's message m (first draw)."""
    from training.fedrl_privacy import SeededNoise

    noise = SeededNoise(seed, ALPHA, m).normal(tuple(released.shape)).numpy()
    return released - sigma * noise


def misfit(released: np.ndarray, sigma: float, seed: int, m: int, clip: float) -> tuple:
    """How badly candidate m explains the release, from what the attacker can check: the true m
    leaves alpha's clipped Q, whose rows never exceed the public clip C (and a trained network's
    often sit on it), and adds no energy; any other m adds about 2 sigma^2 a coordinate. So:
    (rows over C, energy left), smaller is better."""
    rest = remove_noise(released, sigma, seed, m)
    over = int((np.linalg.norm(rest, axis=-1) > clip * (1 + 1e-4)).sum())
    return over, float(np.square(rest).sum())


def derandomize(
    releases: list, sigma: float, seed: int, guess: int, window: int, clip: float, joint: int = 8
):
    """The attacker: (each release minus the noise it regenerated, the counts it chose). It
    finds the first count jointly over the first `joint` releases (one message each, so their
    counts follow each other), searching `guess` +- `window`; then each next release at one of
    the 4 counts after the last."""
    j = min(joint, len(releases))

    def joint_misfit(m0: int) -> tuple:
        fits = [misfit(releases[i], sigma, seed, m0 + i, clip) for i in range(j)]
        return sum(f[0] for f in fits), sum(f[1] for f in fits)

    m = min(range(max(1, guess - window), guess + window + 1), key=joint_misfit)
    out, counts = [], []
    for i, c in enumerate(releases):
        if i:
            m = min(range(m + 1, m + 5), key=lambda k: misfit(c, sigma, seed, k, clip))
        out.append(remove_noise(c, sigma, seed, m))
        counts.append(m)
    return out, counts


def one_run(
    sigma: float, seed: int, rounds: int, steps: int, window: int, work: Path
) -> list[dict]:
    cache = work / f"sigma{sigma:g}-seed{seed}-r{rounds}-t{steps}-w{window}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    import torch

    from experiments.privacy.fedrl_attack import _settings, attack_auc, true_pairs
    from training.fedrl_privacy import new_key
    from training.fedrl_protocol import DirectTransport

    torch.set_num_threads(1)
    s = _settings(sigma, seed)  # study mode: the network is trained the same way for both
    runner = DirectTransport(s)
    for rnd in range(1, rounds + 1):
        runner.round(rnd == rounds)
    alpha = runner.alpha
    rows = []
    rng = np.random.default_rng([seed, 61])
    for mode in ("study (seeded)", "default (secret key)"):
        alpha.noise_key = None if mode.startswith("study") else new_key()
        start = alpha.counters["messages"] + 1  # the count of the first release below
        c, truth, labels, maps = true_pairs(alpha, s, steps, seed)
        per_release = np.split(c, steps)
        guess = start + int(rng.integers(-window // 2, window // 2 + 1))  # no access to alpha
        rest, counts = derandomize(per_release, sigma, seed, guess, window, s.clip_bound)
        recovered = np.concatenate(rest)
        err = np.abs(recovered - truth).reshape(steps, -1).max(axis=1)
        rows.append(
            {
                "sigma": sigma,
                "seed": seed,
                "mode": mode,
                "rounds": rounds,
                "releases": steps,
                "recovered": float((err < 1e-3).mean()),
                "max_error_median": float(np.median(err)),
                "counts_right": float(np.mean(np.array(counts) == start + np.arange(steps))),
                **{f"noised_{k}": v for k, v in attack_auc(c, labels, maps, seed).items()},
                **{
                    f"derandomized_{k}": v
                    for k, v in attack_auc(recovered, labels, maps, seed).items()
                },
                **{f"truth_{k}": v for k, v in attack_auc(truth, labels, maps, seed).items()},
            }
        )
        print(
            f"sigma {sigma:g} seed {seed} {mode}: recovered {rows[-1]['recovered']:.2f} of "
            f"{steps} releases, AUC noised {rows[-1]['noised_auc']:.3f} -> after subtraction "
            f"{rows[-1]['derandomized_auc']:.3f} (truth {rows[-1]['truth_auc']:.3f})",
            flush=True,
        )
    work.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(rows))
    return rows


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (sigma, mode), g in runs.groupby(["sigma", "mode"], sort=True):
        rows.append(
            {
                "sigma": sigma,
                "noise": mode,
                "seeds": len(g),
                "releases_recovered": mean_sd(g["recovered"], 2),
                "auc_noised": mean_sd(g["noised_auc"], 3),
                "auc_after_subtraction": mean_sd(g["derandomized_auc"], 3),
                "auc_true_outputs": mean_sd(g["truth_auc"], 3),
                "chance_auc": mean_sd(g["noised_auc_shuffled"], 3),
            }
        )
    return pd.DataFrame(rows)


def markdown(t: pd.DataFrame) -> str:
    from experiments.tables import pipe_table

    head = ["σ", "noise", "seeds", "releases recovered", "attack AUC on the release",
            "after subtracting regenerated noise", "on α's true outputs", "chance"]  # fmt: skip
    body = [
        [
            f"{r.sigma:g}",
            r.noise,
            r.seeds,
            r.releases_recovered,
            r.auc_noised,
            r.auc_after_subtraction,
            r.auc_true_outputs,
            r.chance_auc,
        ]  # fmt: skip
        for r in t.itertuples()
    ]
    return pipe_table(head, body)


def plot(runs: pd.DataFrame, png: Path, command: str) -> None:
    sigmas = sorted(runs["sigma"].unique())
    fig, axes = figures.subplots(1, len(sigmas), figsize=(5.5 * len(sigmas), 4), squeeze=False)
    cols = (("noised_auc", "the release"), ("derandomized_auc", "after subtraction"),
            ("truth_auc", "α's true outputs"), ("noised_auc_shuffled", "chance"))  # fmt: skip
    for ax, sigma in zip(axes[0], sigmas):
        g = runs[runs["sigma"] == sigma]
        modes = sorted(g["mode"].unique(), reverse=True)
        w = 0.8 / len(modes)
        for i, mode in enumerate(modes):
            h = g[g["mode"] == mode]
            x = np.arange(len(cols)) + (i - (len(modes) - 1) / 2) * w
            ax.bar(x, [h[c].mean() for c, _ in cols], w, yerr=[h[c].std() for c, _ in cols],
                   capsize=3, label=mode)  # fmt: skip
        ax.axhline(0.5, color="grey", lw=0.8)
        ax.set_xticks(np.arange(len(cols)), [c[1] for c in cols], fontsize=8)
        ax.set(ylim=(0.4, 1.0), ylabel="ROC AUC, α's neighbour blocked",
               title=f"σ = {sigma:g}: β reads α's view")  # fmt: skip
        ax.legend(fontsize=8)
    fig.tight_layout()
    figures.save(fig, png, command)


def check(cell: dict, where) -> None:
    """What a run of this study accepts (experiments/study.py)."""
    if min(cell["rounds"], cell["steps"], cell["window"]) < 1 or cell["sigma"] <= 0:
        raise ValueError(f"{where}: grid.rounds, steps, window: at least 1; grid.sigma: above 0")
