"""What beta learns about alpha from the noised Q outputs it receives (issue 44 item 4, FedRL).

    python -m experiments.study experiments/studies/fedrl_attack.toml           # one network per sigma
    python -m experiments.study experiments/studies/fedrl_attack_defence.toml   # one, released at each

Alpha's private view is its 3x3 window of the map (paper Sec. 5.1); what leaves alpha about it
is C_alpha = Q_hat_alpha(s_alpha), its Q outputs clipped to C and noised with N(0, sigma^2)
(Eq. 1-2, `training.fedrl_privacy.release`), sent to beta at every step. The attack: can beta
tell from one C_alpha whether each of alpha's four neighbouring cells is blocked, that is, read
alpha's surroundings, which beta's own 5x5 window does not show?

Per (sigma, seed): FedRL trains `rounds` rounds in one process (`DirectTransport`, the same
parties and release path a Flower run uses) with the package's defaults (8x8 embedded maps)
and that sigma; its test SuccRate is the task score. Then alpha's trained Q-network releases
C_alpha, exactly as `Alpha.observe` does, for every step of random walks on the *test* maps
(never trained on), and the four labels are read from alpha's current window.

What it measures: a linear reader of C_alpha. It holds (C_alpha, label) pairs for half of the
test maps (as if it had seen alpha's surroundings there) and a logistic regression (sklearn)
learns to read them; it is scored (ROC AUC) on the other half, maps disjoint. Chance is 0.5:
`auc_shuffled` is the same attacker trained on labels shuffled across pairs, the measured
floor with its spread. It is not the strongest attacker: against the study mode's seeded
noise (which these runs use, so that they repeat) the derandomizer of
experiments/privacy/fedrl_derandomize.py removes the noise outright; against a default run's
secret noise no such attack is known, and this reader is what we measure. epsilon is alpha's,
at delta = 1e-5: one release, and the run's as the server counts it (its most-released
record, training or evaluation).

Two readings of sigma. The default sweep trains one network per sigma, so a column mixes the
network's change with the noise's (the averaged reader's AUC even rises with sigma, as
each network differs). The defence curve (`DEFENCE`) holds one network fixed (trained at the paper's
sigma = 1, per seed) and releases its outputs on the same walks at each sigma, with fresh
secret noise: the defence curve a reader needs (results fedrl_attack_defence*).

Results: experiments/results/fedrl_attack{,_runs}.csv and fedrl_attack.png. Runs are cached
per (sigma, seed, rounds) in `work` and reused.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from experiments import figures
from experiments.fedrl import numerics  # noqa: F401  (pins the floating-point kernels first)
from experiments.tables import (
    mean_sd,
)

DIRECTIONS = ("up", "down", "left", "right")
DELTA = 1e-5


def neighbours_blocked(obs_alpha: np.ndarray) -> np.ndarray:
    """(N, 4) bool: whether each 4-neighbour of alpha is blocked (0 = obstacle or off the map)
    in its current window, the last of its history (N, H, w, w)."""
    win = obs_alpha[:, -1]
    c = win.shape[-1] // 2
    cells = (win[:, c - 1, c], win[:, c + 1, c], win[:, c, c - 1], win[:, c, c + 1])
    return np.stack([x == 0 for x in cells], axis=1)


def released_pairs(alpha, s, steps: int, n_envs: int = 64, seed: int = 0, repeats: int = 1):
    """(C_alpha as released (N, A), labels (N, 4), map index (N,)): random walks of both agents
    on the test maps, alpha's trained Q-network releasing at every step (its own noise). With
    `repeats` k > 1, each C_alpha is the mean of k releases of the same observation (fresh noise
    each): the attacker who averages every release it got of one transition."""
    from envs.gridworld import GridWorld

    world = GridWorld(
        s.maps(),
        s.split("test"),
        n_envs,
        windows=(s.w_alpha, s.w_beta),
        history=s.history_len,
        max_steps=s.max_steps,
        rules=s.rules,
        seed=10_000 + seed,
    )
    rng = np.random.default_rng([seed, 44])
    cs, labels, maps = [], [], []
    for _ in range(steps):
        cs.append(np.mean([alpha.observe(world) for _ in range(repeats)], axis=0))
        labels.append(neighbours_blocked(world.obs_alpha))
        maps.append(world.map_index.copy())
        world.step(rng.integers(0, 4, n_envs), rng.integers(0, 4, n_envs))
    return np.concatenate(cs), np.concatenate(labels), np.concatenate(maps)


def random_floor(s) -> float:
    """Test SuccRate (%) of Table 1's random-both floor (`training.fedrl_baselines`) on the
    same test maps: the task's floor beside the learned SuccRate."""
    from training.fedrl_baselines import make

    return 100.0 * make("random-both", s).evaluate("test")["test-succ-rate"]


def attack_auc(c: np.ndarray, labels: np.ndarray, maps: np.ndarray, seed: int = 0) -> dict:
    """ROC AUC of a logistic-regression reader of each label from C_alpha, trained on half of
    the maps and scored on the other half; the mean over the labels both halves hold both
    classes of, and the same with labels shuffled across pairs (the chance floor)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng([seed, 7])
    uniq = np.unique(maps)
    train_maps = set(rng.permutation(uniq)[: len(uniq) // 2].tolist())
    tr = np.array([m in train_maps for m in maps])
    out = {}
    for name, y_all in (("auc", labels), ("auc_shuffled", labels[rng.permutation(len(labels))])):
        aucs = {}
        for k, d in enumerate(DIRECTIONS):
            y = y_all[:, k]
            if len(set(y[tr])) < 2 or len(set(y[~tr])) < 2:
                continue
            reader = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
            reader.fit(c[tr], y[tr])
            aucs[d] = roc_auc_score(y[~tr], reader.predict_proba(c[~tr])[:, 1])
        out[name] = float(np.mean(list(aucs.values()))) if aucs else float("nan")
        if name == "auc":
            out.update({f"auc_{d}": v for d, v in aucs.items()})
    return out


def _settings(sigma: float, seed: int):
    """The package's default FedRL run (8x8 embedded maps) at this sigma and seed."""
    from config import parse
    from config.schema import merged
    from experiments.fedrl import STUDY
    from training.fedrl_setup import Settings

    cfg = {**STUDY, "method": "fedrl", "seed": seed, "fedrl.sigma": sigma}
    if sigma == 0:  # the undefended point of the curve: no noise, said so explicitly
        cfg["fedrl.insecure-no-noise"] = True
    return Settings.of(parse(merged(cfg)))


def one_run(sigma: float, seed: int, rounds: int, steps: int, work: Path) -> dict:
    """Train, score, attack; cached in work/sigma<s>-seed<k>-r<rounds>.json."""
    cache = work / f"sigma{sigma:g}-seed{seed}-r{rounds}-t{steps}.json"
    if cache.is_file():
        row = json.loads(cache.read_text())
        # the floor is cheap and not trained: computed afresh, never read from an older cache
        return row | {"random_succ_rate": random_floor(_settings(sigma, seed))}
    import torch

    from training.fedrl_privacy import epsilon
    from training.fedrl_protocol import DirectTransport

    torch.set_num_threads(1)
    s = _settings(sigma, seed)
    runner = DirectTransport(s)
    for rnd in range(1, rounds + 1):
        runner.round(rnd == rounds)
    scores = runner.evaluate("test")
    succ = next(v for k, v in scores.items() if "succ" in k.lower() and "test_noise=on" in k)
    spent = runner.proto.privacy()  # the server's count, before the walks below release more
    eps_run, k = float(spent["alpha-privacy-epsilon"]), int(spent["alpha-max-releases"])
    c, labels, maps = released_pairs(runner.alpha, s, steps, seed=seed)
    row = {
        "sigma": sigma,
        "seed": seed,
        "rounds": rounds,
        "pairs": len(c),
        "succ_rate": 100.0 * float(succ),  # percent, as Table 1 prints it
        "random_succ_rate": random_floor(s),
        "eps_release": epsilon(1, sigma, s.clip_bound, DELTA),
        "eps_run": eps_run,
        "blocked_share": float(labels.mean()),
        **attack_auc(c, labels, maps, seed),
    }
    # the averaging attacker: every release of the run's most-released record, averaged
    row["releases_averaged"] = k
    if sigma > 0 and k > 1:
        c, labels, maps = released_pairs(runner.alpha, s, steps, seed=seed, repeats=k)
        avg = attack_auc(c, labels, maps, seed)
        row["auc_averaged"], row["auc_averaged_shuffled"] = avg["auc"], avg["auc_shuffled"]
    else:
        row["auc_averaged"], row["auc_averaged_shuffled"] = row["auc"], row["auc_shuffled"]
    work.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(row))
    print(
        f"sigma {sigma:g} seed {seed}: SuccRate {row['succ_rate']:.1f}, attack AUC "
        f"{row['auc']:.3f} (shuffled {row['auc_shuffled']:.3f}), eps/release "
        f"{row['eps_release']:.3g}",
        flush=True,
    )
    return row


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for sigma, g in runs.groupby("sigma", sort=True):
        rows.append(
            {
                "sigma": sigma,
                "seeds": len(g),
                "eps_release": g["eps_release"].iloc[0],
                "eps_run": "∞" if np.isinf(g["eps_run"]).any() else mean_sd(g["eps_run"], 0),
                "succ_rate": mean_sd(g["succ_rate"]),
                "random_succ_rate": mean_sd(g["random_succ_rate"])
                if "random_succ_rate" in g
                else "",
                "attack_auc": mean_sd(g["auc"], 3),
                "releases_averaged": mean_sd(g["releases_averaged"], 0),
                "attack_auc_averaged": mean_sd(g["auc_averaged"], 3),
                "chance_auc": mean_sd(g["auc_shuffled"], 3),
                "paper": "sigma = 1 (the paper's)" if sigma == 1 else "",
            }
        )
    return pd.DataFrame(rows)


def markdown(t: pd.DataFrame) -> str:
    from experiments.tables import pipe_table

    head = [
        "σ",
        "seeds",
        "ε per release",
        "ε, run (α)",
        "test SuccRate",
        "random policy's",
        "attack AUC, one release",
        "releases of one transition",
        "attack AUC, all of them averaged",
        "chance (shuffled)",
    ]
    body = [
        [
            f"{r.sigma:g}" + (" (paper)" if r.sigma == 1 else ""),
            int(r.seeds),
            "∞" if not np.isfinite(float(r.eps_release)) else f"{float(r.eps_release):.3g}",
            r.eps_run,
            r.succ_rate,
            r.random_succ_rate,
            r.attack_auc,
            r.releases_averaged,
            r.attack_auc_averaged,
            r.chance_auc,
        ]
        for r in t.itertuples()
    ]
    return pipe_table(head, body)


def auc_panel(ax, runs: pd.DataFrame, curves, title: str):
    """AUC (mean ± sd over seeds) against sigma on a log axis, sigma = 0 drawn at the left;
    chance and the paper's sigma marked. Returns (groups by sigma, sigmas, their x)."""
    g = runs.groupby("sigma")
    sig = np.array(sorted(runs["sigma"].unique()))
    x = np.where(sig > 0, sig, sig[sig > 0].min() / 10 if (sig > 0).any() else 1e-2)
    for col, label, style in curves:
        m, sd = g[col].mean().reindex(sig), g[col].std().reindex(sig).fillna(0)
        ax.errorbar(x, m, yerr=sd, fmt=style, capsize=3, label=label)
    ax.axhline(0.5, color="grey", lw=0.8)
    ax.axvline(1.0, color="red", ls=":", lw=1, label="paper's σ = 1")
    ax.set(xscale="log", xlabel="σ of the released Q outputs (σ = 0 drawn at the left)",
           ylabel="ROC AUC, α's neighbour blocked", title=title)  # fmt: skip
    ax.legend(fontsize=8)
    return g, sig, x


def plot(runs: pd.DataFrame, png: Path, command: str) -> None:
    fig, (ax, bx) = figures.subplots(1, 2, figsize=(11, 4))
    curves = (("auc", "attack, one release", "o-"),
              ("auc_averaged", "attack, a transition's releases averaged", "^-"),
              ("auc_shuffled", "chance (labels shuffled)", "s--"))  # fmt: skip
    g, sig, x = auc_panel(ax, runs, curves, "What β reads of α's view from C_α")
    m, sd = g["succ_rate"].mean().reindex(sig), g["succ_rate"].std().reindex(sig).fillna(0)
    bx.errorbar(x, m, yerr=sd, fmt="o-", capsize=3, label="FedRL")
    bx.axhline(runs["random_succ_rate"].mean(), color="grey", ls="--", label="random policy")
    bx.axvline(1.0, color="red", ls=":", lw=1)
    bx.set(xscale="log", xlabel="σ", ylabel="test SuccRate (%)", title="The task at the same σ")
    bx.legend(fontsize=8)
    fig.tight_layout()
    figures.save(fig, png, command)


def true_pairs(alpha, s, steps: int, seed: int):
    """`released_pairs` with, after the releases, alpha's un-noised clipped outputs behind
    them (the release's first term, read off the release itself): (released, true, labels,
    map index)."""
    import training.fedrl_party as party_mod

    real, truths = party_mod.release, []

    def spy(q, clip, sigma, noise=None):
        truths.append(real(q, clip, 0.0).detach().numpy())
        return real(q, clip, sigma, noise)

    party_mod.release = spy
    try:
        c, labels, maps = released_pairs(alpha, s, steps, seed=seed)
    finally:
        party_mod.release = real
    return c, np.concatenate(truths), labels, maps


def defence_run(sigmas, seed: int, rounds: int, steps: int, work: Path) -> list[dict]:
    """One network (FedRL trained at the paper's sigma = 1), its outputs on the test walks
    released at each sigma with fresh secret noise (training/fedrl_privacy.release), read by
    the same attacker. Cached in work/defence-seed<k>-r<rounds>-t<steps>.json."""
    import torch

    from training.fedrl_privacy import SecretNoise, epsilon, new_key, release
    from training.fedrl_protocol import DirectTransport

    cache = work / f"defence-seed{seed}-r{rounds}-t{steps}.json"
    done = json.loads(cache.read_text()) if cache.is_file() else []
    todo = [x for x in sigmas if x not in {r["sigma"] for r in done}]
    if not todo:
        return [r for r in done if r["sigma"] in sigmas]
    torch.set_num_threads(1)
    s = _settings(1.0, seed)
    runner = DirectTransport(s)
    for rnd in range(1, rounds + 1):
        runner.round(rnd == rounds)
    _, truth, labels, maps = true_pairs(runner.alpha, s, steps, seed)
    for sigma in todo:
        c = release(torch.from_numpy(truth), s.clip_bound, sigma, SecretNoise(new_key(), 1))
        done.append(
            {
                "sigma": sigma,
                "seed": seed,
                "rounds": rounds,
                "pairs": len(truth),
                "trained_at_sigma": 1.0,
                "eps_release": epsilon(1, sigma, s.clip_bound, DELTA),
                **attack_auc(c.numpy(), labels, maps, seed),
            }
        )
        print(f"defence curve seed {seed}: sigma {sigma:g} AUC {done[-1]['auc']:.3f}", flush=True)
    work.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(done))
    return [r for r in done if r["sigma"] in sigmas]


def summarize_defence(runs: pd.DataFrame) -> pd.DataFrame:
    from experiments.tables import paired_interval

    rows = []
    for sigma, g in runs.groupby("sigma", sort=True):
        d, lo, hi = paired_interval(g["auc"].to_numpy(), g["auc_shuffled"].to_numpy())
        rows.append(
            {
                "sigma": sigma,
                "seeds": len(g),
                "eps_release": g["eps_release"].iloc[0],
                "attack_auc": mean_sd(g["auc"], 3),
                "chance_auc": mean_sd(g["auc_shuffled"], 3),
                "auc_minus_chance": f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]",
                "beyond_chance": bool(lo > 0),
                "paper": "sigma = 1 (the paper's)" if sigma == 1 else "",
            }
        )
    return pd.DataFrame(rows)


def markdown_defence(t: pd.DataFrame) -> str:
    from experiments.tables import pipe_table

    head = ["σ of the release", "seeds", "ε per release", "attack AUC, one release",
            "chance (shuffled)", "AUC − chance [95%]"]  # fmt: skip
    body = [
        [
            f"{r.sigma:g}" + (" (paper)" if r.sigma == 1 else ""),
            int(r.seeds),
            "∞" if not np.isfinite(float(r.eps_release)) else f"{float(r.eps_release):.3g}",
            r.attack_auc,
            r.chance_auc,
            r.auc_minus_chance,
        ]
        for r in t.itertuples()
    ]
    return pipe_table(head, body)


def plot_defence(runs: pd.DataFrame, png: Path, command: str) -> None:
    fig, ax = figures.subplots(figsize=(6, 4))
    curves = (("auc", "attack, one release", "o-"),
              ("auc_shuffled", "chance (labels shuffled)", "s--"))  # fmt: skip
    auc_panel(ax, runs, curves, "One trained network, released at each σ")
    fig.tight_layout()
    figures.save(fig, png, command)


def check(cell: dict, where) -> None:
    """What a run of this study accepts (experiments/study.py)."""
    if cell.get("rounds", 1) < 1 or cell.get("steps", 1) < 1:
        raise ValueError(f"{where}: grid.rounds and grid.steps: at least 1")
    if any(x < 0 for x in np.atleast_1d(cell.get("sigma", cell.get("sigmas", 0)))):
        raise ValueError(f"{where}: grid.sigma(s): at least 0")


# the defence curve's study (experiments/studies/fedrl_attack_defence.toml), a standard one
DEFENCE = SimpleNamespace(
    check=check, summarize=summarize_defence, markdown=markdown_defence, plot=plot_defence
)
