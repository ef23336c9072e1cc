"""Membership inference on the driving silos (issue 44 item 4, FedAvg): from a released model,
can an attacker tell a silo's training images from images of the same silo it never trained
on? At every privacy setting of the DP frontier, beside its RMSE.

    python -m experiments.study experiments/studies/dp_frontier.toml         # the runs
    python -m experiments.study experiments/studies/driving_membership.toml  # the attack

The study file names the frontier's rows (`setting`, its run folders' prefix), seeds and runs
folder; each (setting, seed) is one call of `attack`:

- the target is the run's last global model (`checkpoints/round_<last>.pt`): what FedAvg
  releases to every party after the run, with no DP, central DP (noise on the mean) or local
  DP (noise on each party's update). Its RMSE, ε and `stopped` are read from the same run
  (`dp_frontier.scored`), so the table describes the models it attacked;
- the attack is the loss threshold of Yeom et al. (CSF 2018): a lower squared error on an image
  says "member". Its success is the ROC AUC of -loss between the silo's 300 training images
  (members) and its 100 test images (non-members, the same silo's distribution), averaged over
  the 10 silos. The threshold attack needs no shadow model, and AUC needs no threshold;
- chance is 0.5; `auc_shuffled` is the same score with membership labels shuffled, the
  measured floor;
- the reference row (setting `silo-alone`): each silo's own model trained alone for as many
  epochs (`dp_frontier.silo_alone_models`, the frontier's floor), attacked as if it were
  released. Local-only releases nothing, so what it reveals is chance; this row says what
  federating protects.

A run the noise wrecked (non-finite weights: the frontier's `stopped` runs) is attacked at its
last finite checkpoint and flagged. Results: experiments/results/driving_membership{,_runs}.csv
and driving_membership.png.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from experiments import figures
from experiments.privacy.dp_frontier import scored, silo_alone_models
from experiments.simulation_runs import STOPPED
from experiments.tables import mean_sd, pipe_table

ALONE = "silo-alone"
ALONE_MODE = "silo alone (not released)"


def per_sample_loss(model, x: np.ndarray, y: np.ndarray, batch: int = 256) -> np.ndarray:
    """Squared steering error of each image (eval mode: the released batch-norm statistics)."""
    import torch

    model.eval()
    with torch.no_grad():
        pred = torch.cat(
            [model(torch.from_numpy(x[i : i + batch])) for i in range(0, len(x), batch)]
        )
    return (pred.numpy().reshape(-1) - y.reshape(-1)) ** 2


def membership_auc(loss_in: np.ndarray, loss_out: np.ndarray, rng) -> tuple[float, float]:
    """(AUC of -loss for members vs non-members, the same with the labels shuffled)."""
    from sklearn.metrics import roc_auc_score

    member = np.r_[np.ones(len(loss_in)), np.zeros(len(loss_out))]
    score = -np.r_[loss_in, loss_out]
    if not np.isfinite(score).all():
        return float("nan"), float("nan")
    return roc_auc_score(member, score), roc_auc_score(rng.permutation(member), score)


def mean_auc(pairs, seed: int) -> dict:
    """Mean over silos of each (silo, model)'s AUC and shuffled AUC (one stream per run)."""
    rng = np.random.default_rng([seed, 99])
    aucs = [
        membership_auc(
            per_sample_loss(m, s.x_train, s.y_train), per_sample_loss(m, s.x_test, s.y_test), rng
        )
        for s, m in pairs
    ]
    return {
        "auc": float(np.mean([a for a, _ in aucs])),
        "auc_shuffled": float(np.mean([b for _, b in aucs])),
    }


def run_config(run: Path) -> dict:
    """The run's config.json; a missing run names the study that makes it."""
    path = run / "config.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"driving_membership: {run} is missing; run `python -m experiments.study "
            "experiments/studies/dp_frontier.toml` first (it writes runs/dp_frontier)"
        )
    cfg = json.loads(path.read_text())
    if cfg.get("driving.batchnorm-statistics", "shared") != "shared":
        raise ValueError(
            f"driving_membership: {run} kept BatchNorm statistics local "
            "(driving.batchnorm-statistics); its release holds none, and this attack scores a "
            "model with the statistics it was released with"
        )
    return cfg


def silos_of(cfg: dict, seed: int) -> tuple[list, object]:
    """The run's silos, rebuilt from its config (the data are generated from the seed)."""
    from config import parse
    from envs.driving_silos import make_silo

    d = parse(cfg).driving
    silos = [
        make_silo(k, seed, d.train_per_silo, d.test_per_silo, d.image_size, d.channels, d.non_iid)
        for k in range(cfg["num-clients"])
    ]
    return silos, d


def last_finite(run: Path):
    """(state dict, round) of the run's last checkpoint whose weights are all finite."""
    import torch

    for ck in sorted((run / "checkpoints").glob("round_*.pt"), reverse=True):
        state = torch.load(ck, weights_only=True)
        if all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point()):
            return state, int(ck.stem.split("_")[1])
    return None, 0


def attack(setting: str, seed: int, work: Path) -> dict:
    """One row: the frontier run `<setting>-s<seed>` in `work` attacked at its last finite
    global model, or (`silo-alone`) each silo's own model trained alone on the same silos."""
    import torch

    from models.resnet8 import ResNet8

    torch.set_num_threads(1)
    run = Path(work) / f"{'none' if setting == ALONE else setting}-s{seed}"
    cfg = run_config(run)
    silos, d = silos_of(cfg, seed)
    if setting == ALONE:
        models = silo_alone_models(silos, d, cfg["num-server-rounds"], seed)
        alone = {"mode": ALONE_MODE, "knob": 0.0, "seed": seed, "epsilon": 0.0}
        return alone | mean_auc(models, seed)
    state, rnd = last_finite(run)
    if state is None:
        raise ValueError(f"driving_membership: {run} has no finite checkpoint to attack")
    model = ResNet8(d.image_size, d.channels)
    model.load_state_dict(state)
    row = scored(run, cfg, seed, (run / STOPPED).is_file())
    keep = ("mode", "knob", "seed", "epsilon", "rmse", "stopped")
    return (
        {k: row[k] for k in keep}
        | {"attacked_round": rnd}
        | mean_auc([(s, model) for s in silos], seed)
    )


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (mode, knob), g in runs.groupby(["mode", "knob"], sort=False):
        out.append(
            {
                "mode": mode,
                "knob": knob,
                "seeds": len(g),
                "epsilon": float(g["epsilon"].mean()),
                "rmse": mean_sd(g["rmse"].dropna(), 3) if g["rmse"].notna().any() else "",
                "stopped": int(g["stopped"].fillna(False).astype(bool).sum()),
                "attack_auc": mean_sd(g["auc"], 3),
                "chance_auc": mean_sd(g["auc_shuffled"], 3),
            }
        )
    return pd.DataFrame(out)


def _setting(mode: str, knob: float) -> str:
    return {"central": f"central z = {knob:g}", "local": f"local ε = {knob:g} per release"}.get(
        mode, "no DP" if mode == "none" else mode
    )


def markdown(t: pd.DataFrame) -> str:
    head = [
        "setting",
        "seeds",
        "ε",
        "RMSE, last round",
        "runs stopped",
        "membership AUC",
        "chance (shuffled)",
    ]
    body = [
        [
            _setting(r.mode, r.knob),
            int(r.seeds),
            "∞" if not np.isfinite(r.epsilon) else ("0" if r.epsilon == 0 else f"{r.epsilon:.3g}"),
            "wrecked (every run stopped)"
            if r.stopped == r.seeds and r.seeds
            else (r.rmse if isinstance(r.rmse, str) and r.rmse else "–"),  # fmt: skip
            int(r.stopped),
            r.attack_auc,
            r.chance_auc,
        ]
        for r in t.itertuples()
    ]
    return pipe_table(head, body)


def plot(runs: pd.DataFrame, png: Path, command: str) -> None:
    fig, ax = figures.subplots(figsize=(7, 4))
    for mode, marker in (("central", "o"), ("local", "^")):
        g = runs[runs["mode"] == mode].groupby("epsilon")["auc"]
        ax.errorbar(g.mean().index, g.mean(), yerr=g.std().fillna(0), fmt=f"{marker}-",
                    capsize=3, label=f"{mode} DP")  # fmt: skip
    for mode, style, label in (("none", "-", "no DP (ε = ∞)"),
                               (ALONE_MODE, "--", "a silo's own model, if released")):  # fmt: skip
        v = runs.loc[runs["mode"] == mode, "auc"]
        if len(v):
            ax.axhline(v.mean(), ls=style, color="black" if mode == "none" else "grey", label=label)
    ax.axhline(runs["auc_shuffled"].mean(), ls=":", color="red", label="chance (labels shuffled)")
    ax.set(xscale="log", xlabel="ε at δ = 1e-5 (after all rounds)", ylabel="membership ROC AUC",
           title="Loss-threshold membership inference on the global model")  # fmt: skip
    ax.legend(fontsize=7)
    fig.tight_layout()
    figures.save(fig, png, command)
