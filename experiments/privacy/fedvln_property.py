"""Property inference on a FedVLN house's release (issue 44 item 4): from the update one house
sends, which room types does the house contain? FedVLN's privacy claim (paper Sec. 4.2) is that
sharing only the language encoder in pre-exploration protects the unseen house; this puts the
claim to a test, per release variant, against chance.

    python -m experiments.study experiments/studies/fedvln_property.toml

The study file names the seeds, the houses (`houses`), the local steps before a release
(`steps`) and the noise levels (`noise`); each seed is one call of `attack_seed`. Per seed, the
global model is the follower every house starts from (`experiments.fedvln.speaker.follower`:
the centralized follower, best val_unseen SR; trained there if missing). Houses come from the
public generator (`envs.vln_houses`, a seed no run trains on), so an attacker can make as many
shadow houses as it likes. Each house adapts a copy of the global model for `steps` steps of
the pre-exploration recipe on its own instructed routes (the house grammar's words: a perfect
speaker, and the labelled data a seen house trains on), as a house does before it sends. What
it sends:

- `whole model` (agent training and fed-full pre-exploration): the update of every parameter;
- `language encoder` (fed-lan and fed-lan+seen: `lang_encoder.*` only, what the house's policy
  lets out);
- `nothing` (env-based pre-exploration): no update leaves the house; chance by construction.

The attacker's features of a release: the L2 norm of each word's row of the embedding update
(a word the house's instructions never use gets no gradient, so its row barely moves), and a
fixed signed-hash sketch (128 buckets) of every other released parameter's update (the language
encoder's own LSTM and projection, or the whole model's). For
each room type present in 20-80% of the houses, a logistic regression (sklearn) trained on the
shadow houses predicts "the house contains it"; 5-fold cross-validation over the houses
(shadow and target disjoint in each fold), ROC AUC of the pooled out-of-fold scores, the mean
over room types; `auc_shuffled` is the same with labels shuffled across houses (the measured
chance floor). Defended with local noise (`noise`): Gaussian noise of that std is added to
every released number before the attacker sees it (what a local-DP mod does to the release;
the whole model's release gets the same std on every parameter).

Results: experiments/results/fedvln_property{,_runs}.csv and fedvln_property.png; per-seed
releases cached in the study's `work` folder.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from experiments import figures
from experiments.tables import mean_sd, pipe_table

VARIANTS = {"whole model": "", "language encoder": "lang_encoder."}
PROJECTION = 128
SHADOW_SEED = 7_000  # the generator seed of the attack's houses: no run trains on them


def room_types(setup, name: str) -> set[str]:
    """Region codes of the house's viewpoints (what the property labels are made of)."""
    return {v.get("region_label") for v in setup.data.rooms.get(name, {}).values()} - {None}


def releases(follower, vocab, setup, names: list[str], steps: int, seed: int) -> dict:
    """{house: {parameter name: update}}: each house adapts a copy of `follower` for `steps`
    steps on its own labelled routes (pre-exploration recipe), update = adapted - start."""
    import torch

    from config.fedvln_recipe import CPU
    from training import vln_agent
    from training.vln_loop import make_optimizer

    s = dataclasses.replace(vln_agent.AgentSettings(batch_size=16))
    tokens = vln_agent.Tokens(vocab, s.max_words)
    start = {k: v.detach().clone() for k, v in follower.state_dict().items()}
    out = {}
    for i, name in enumerate(names):
        model = copy.deepcopy(follower)
        opt = make_optimizer(CPU["preexplore"].optimizer, model.parameters(), 1e-4)
        torch.manual_seed(seed * 1000 + i)
        episodes = [e for e in setup.split("train") if e.scan == name]
        vln_agent.train_batches(
            model, opt, setup.world, episodes, tokens, s, iterations=steps,
            rng=np.random.default_rng([seed, i]),
        )  # fmt: skip
        out[name] = {
            k: (v.detach() - start[k]).numpy().astype(np.float32)
            for k, v in model.state_dict().items()
            if v.is_floating_point()
        }
    return out


def features(update: dict, prefix: str, vocab_size: int, rng_seed: int) -> np.ndarray:
    """What the attacker reads from a release: each word's embedding-row norm of the update, and
    a fixed signed-hash sketch (PROJECTION buckets) of every other released parameter's update
    (those under `prefix`; "" is the whole model)."""
    rows = np.linalg.norm(update["lang_encoder.embedding.weight"][:vocab_size], axis=1)
    rest = np.concatenate(
        [
            v.ravel()
            for k, v in sorted(update.items())
            if k.startswith(prefix) and k != "lang_encoder.embedding.weight"
        ]
    )
    rng = np.random.default_rng(rng_seed)
    bucket, sign = rng.integers(0, PROJECTION, len(rest)), rng.choice([-1.0, 1.0], len(rest))
    return np.concatenate([rows, np.bincount(bucket, weights=sign * rest, minlength=PROJECTION)])


def attack(x: np.ndarray, labels: np.ndarray, seed: int) -> dict:
    """Mean ROC AUC over the property columns of `labels` (houses x properties) of a logistic
    reader of `x`, 5-fold over houses, and the same with each column's labels shuffled."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng([seed, 5])
    out = {"auc": [], "auc_shuffled": []}
    for j in range(labels.shape[1]):
        for key, y in (("auc", labels[:, j]), ("auc_shuffled", rng.permutation(labels[:, j]))):
            score = np.zeros(len(y))
            folds = StratifiedKFold(5, shuffle=True, random_state=seed)
            for tr, te in folds.split(x, y):
                reader = make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=2000))
                reader.fit(x[tr], y[tr])
                score[te] = reader.predict_proba(x[te])[:, 1]
            out[key].append(roc_auc_score(y, score))
    return {k: float(np.mean(v)) for k, v in out.items()}


def check(cell: dict, where) -> None:
    """What the attack accepts (ValueError naming the study file and field)."""
    if cell["houses"] < 10:
        raise ValueError(f"{where}: grid.houses: at least 10 (5 folds of shadow and target)")
    if cell["steps"] < 1:
        raise ValueError(f"{where}: grid.steps: at least 1 local step before a release")
    if not isinstance(cell["noise"], list) or any(z < 0 for z in cell["noise"]):
        raise ValueError(f"{where}: grid.noise: a list of noise stds >= 0 (0: none)")


def attack_seed(seed: int, houses: int, steps: int, noise: list[float], work: Path) -> list[dict]:
    """One seed's rows: every release variant at every noise level, the releases cached in
    `work` (seed, houses and steps in the file name)."""
    import torch

    from envs.vln_houses import HouseSpec
    from experiments.fedvln.speaker import follower as centralized_follower
    from models import vln_checkpoint
    from training.vln_house import house_names, open_setup

    torch.set_num_threads(1)
    follower, vocab, _ = vln_checkpoint.load(centralized_follower(seed))
    setup = open_setup(
        "", "", HouseSpec(train_houses=houses, unseen_houses=1, seed=SHADOW_SEED + seed)
    )
    names = house_names(setup)[0]
    cache = Path(work) / f"seed{seed}-h{houses}-k{steps}.npz"
    keys = [f"{z:g}/{v}/{n}" for z in noise for v in VARIANTS for n in names]
    feats = dict(np.load(cache)) if cache.is_file() else {}
    if set(keys) - set(feats):
        ups = releases(follower, vocab, setup, names, steps, seed)
        for z in noise:
            rng = np.random.default_rng([seed, 3])
            for n in names:
                sent = {k: v + rng.normal(0, z, v.shape) if z > 0 else v for k, v in ups[n].items()}
                for v, prefix in VARIANTS.items():
                    feats[f"{z:g}/{v}/{n}"] = features(sent, prefix, len(vocab), seed)
                    norm = np.sqrt(
                        sum(float((u**2).sum()) for k, u in ups[n].items() if k.startswith(prefix))
                    )
                    feats[f"norm/{v}/{n}"] = np.array([norm])
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(cache, **feats)
    rooms = [room_types(setup, n) for n in names]
    codes = sorted({c for r in rooms for c in r})
    prevalence = {c: np.mean([c in r for r in rooms]) for c in codes}
    props = [c for c in codes if 0.2 <= prevalence[c] <= 0.8]
    labels = np.array([[c in r for c in props] for r in rooms], dtype=int)
    rows = []
    for z in noise:
        for variant in VARIANTS:
            x = np.stack([feats[f"{z:g}/{variant}/{n}"] for n in names])
            r = attack(x, labels, seed)
            norm = float(np.median([feats[f"norm/{variant}/{n}"][0] for n in names]))
            if z == 0:  # which part carries it (docs/privacy.md)
                r |= parts(x, len(vocab), labels, seed)
            rows.append({"seed": seed, "variant": variant, "noise": z, "houses": len(names),
                         "properties": len(props), "update_norm": norm, **r})  # fmt: skip
            print(f"seed {seed} {variant} noise {z:g}: AUC {r['auc']:.3f} "
                  f"(shuffled {r['auc_shuffled']:.3f}) over {len(props)} room types", flush=True)  # fmt: skip
    return rows  # env-based sends nothing: there is no release to attack, so no row


def parts(x: np.ndarray, vocab_size: int, labels: np.ndarray, seed: int) -> dict:
    """Which part of a release carries the property: the attack on the embedding-row norms
    alone, on the other parameters' sketch alone, and on the update's overall size alone."""
    return {
        "rows_only": attack(x[:, :vocab_size], labels, seed)["auc"],
        "sketch_only": attack(x[:, vocab_size:], labels, seed)["auc"],
        "norm_only": attack(np.linalg.norm(x, axis=1, keepdims=True), labels, seed)["auc"],
    }


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (variant, noise), g in runs.groupby(["variant", "noise"], sort=False):
        out.append({"release": variant, "noise": noise, "seeds": len(g),
                    "room_types": int(g["properties"].iloc[0]),
                    "update_norm": float(g["update_norm"].mean()) if "update_norm" in g else np.nan,
                    "attack_auc": mean_sd(g["auc"], 3),
                    "auc_minus_chance": beyond(g)[0], "beyond_chance": beyond(g)[1],
                **{k: mean_sd(g[k].dropna(), 3) for k in ("rows_only", "sketch_only", "norm_only") if k in g}, "chance_auc": mean_sd(g["auc_shuffled"], 3)})  # fmt: skip
    return pd.DataFrame(out)


def beyond(g: pd.DataFrame) -> tuple[str, bool]:
    """The attack's AUC minus the shuffled-label floor, paired by seed, with its 95% interval;
    and whether the interval excludes 0 (only then is the attack beyond chance)."""
    from experiments.tables import paired_interval

    d, lo, hi = paired_interval(g["auc"].to_numpy(), g["auc_shuffled"].to_numpy())
    return f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]", bool(lo > 0)


def markdown(t: pd.DataFrame) -> str:
    head = ["what the house sends", "its update's L2 norm", "local noise std per number", "seeds",
            "room types", "attack AUC", "chance (shuffled)", "AUC − chance [95%]"]  # fmt: skip
    body = [
        [
            r.release,
            "–" if r.update_norm != r.update_norm else f"{r.update_norm:.3g}",
            f"{r.noise:g}",
            int(r.seeds),
            int(r.room_types),
            r.attack_auc,
            r.chance_auc,
            r.auc_minus_chance,
        ]
        for r in t.itertuples()
    ]
    return pipe_table(head, body)


def plot(runs: pd.DataFrame, png: Path, command: str) -> None:
    fig, ax = figures.subplots(figsize=(11, 4.5))
    groups = list(runs.groupby(["variant", "noise"], sort=False))
    for k, ((variant, noise), g) in enumerate(groups):
        ax.bar(
            k, g["auc"].mean(), yerr=g["auc"].std(), capsize=3, color="C0" if noise == 0 else "C1"
        )
        ax.scatter([k] * len(g), g["auc_shuffled"], color="red", marker="x", zorder=3,
                   label="chance (labels shuffled)" if k == 0 else None)  # fmt: skip
    ax.axhline(0.5, color="grey", lw=0.8)
    short = {v: v.replace(" ", "\n", 1) for v in runs["variant"].unique()}
    ax.set_xticks(
        range(len(groups)), [f"{short[v]}\nnoise {n:g}" for (v, n), _ in groups], fontsize=7
    )
    ax.set(ylabel="ROC AUC, 'the house has room type X'", ylim=(0.3, 1.02),
           title="Property inference on one house's release")  # fmt: skip
    ax.legend(fontsize=7)
    fig.tight_layout()
    figures.save(fig, png, command)
