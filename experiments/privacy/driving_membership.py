"""Membership inference on the driving silos (issue 44 item 4, FedAvg/CDL): from a released
model, can an attacker tell a silo's training images from images of the same silo it never
trained on? At every privacy setting of the DP frontier, beside its RMSE.

    python -m experiments.privacy.driving_membership [--seeds 0 1 2] [--force]

It attacks the runs of the FedAvg frontier (`python -m experiments.study
experiments/studies/dp_frontier.toml` first: it writes runs/dp_frontier/<mode>-<knob>-s<seed>),
the same silos, rounds and seeds:

- the target is the last round's global model (`checkpoints/round_<last>.pt`): what FedAvg
  releases to every party after the run, with no DP, central DP (noise on the mean) or local
  DP (noise on each party's update);
- the attack is the loss threshold of Yeom et al. (CSF 2018): a lower squared error on an image
  says "member". Its success is the ROC AUC of -loss between the silo's 300 training images
  (members) and its 100 test images (non-members, the same silo's distribution), averaged over
  the 10 silos. The threshold attack needs no shadow model, and AUC needs no threshold;
- chance is 0.5; `auc_shuffled` is the same score with membership labels shuffled, the
  measured floor;
- the reference row `silo alone (not released)`: each silo's own model trained alone for as
  many epochs (dp_frontier's local-only floor), attacked as if it were released. Local-only
  releases nothing, so what it reveals is chance; this row says what federating protects.

A run the noise wrecked (non-finite weights: the frontier's `stopped` runs) is attacked at its
last finite checkpoint and flagged. Results: experiments/results/driving_membership{,_runs}.csv
and driving_membership.png.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from experiments import figures
from experiments.simulate import RESULTS, ROOT, command_line
from experiments.tables import (
    mean_sd,
    pipe_table,
    plot_only_flag,
    redraw_study,
    refuse_overwrite,
    save_study,
    study_files,
)

FRONTIER = ROOT / "runs" / "dp_frontier"


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


def _silos(cfg: dict, seed: int) -> list:
    from envs.driving_silos import make_silo

    return [
        make_silo(
            k,
            seed,
            cfg["driving.train-per-silo"],
            cfg["driving.test-per-silo"],
            cfg["driving.image-size"],
            cfg["driving.channels"],
            cfg["driving.non-iid"],
        )
        for k in range(cfg["num-clients"])
    ]


def last_finite(run: Path):
    """(state dict, round) of the run's last checkpoint whose weights are all finite."""
    import torch

    for ck in sorted((run / "checkpoints").glob("round_*.pt"), reverse=True):
        state = torch.load(ck, weights_only=True)
        if all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point()):
            return state, int(ck.stem.split("_")[1])
    return None, 0


def attack_run(run: Path) -> dict:
    """Mean membership AUC over the run's silos against its last finite global model."""
    from models.resnet8 import ResNet8

    cfg = json.loads((run / "config.json").read_text())
    state, rnd = last_finite(run)
    if state is None:
        raise SystemExit(f"driving_membership: {run} has no finite checkpoint to attack")
    if cfg.get("driving.batchnorm-statistics", "shared") != "shared":
        raise SystemExit(
            f"driving_membership: {run} kept BatchNorm statistics local "
            "(driving.batchnorm-statistics); its release holds none, and this attack scores a "
            "model with the statistics it was released with"
        )
    model = ResNet8(cfg["driving.image-size"], cfg["driving.channels"])
    model.load_state_dict(state)
    rng = np.random.default_rng([cfg["seed"], 99])
    aucs = [
        membership_auc(
            per_sample_loss(model, s.x_train, s.y_train),
            per_sample_loss(model, s.x_test, s.y_test),
            rng,
        )
        for s in _silos(cfg, cfg["seed"])
    ]
    return {
        "attacked_round": rnd,
        "auc": float(np.mean([a for a, _ in aucs])),
        "auc_shuffled": float(np.mean([b for _, b in aucs])),
    }


def silo_alone(seed: int, cfg: dict) -> dict:
    """Each silo's own model (rounds x local epochs alone, as dp_frontier's local-only floor),
    attacked as if it were released; the mean over silos."""
    import torch

    from models.resnet8 import ResNet8
    from training.steering import LocalOptimizer, train_steering

    torch.set_num_threads(1)
    rng = np.random.default_rng([seed, 99])
    aucs = []
    for k, s in enumerate(_silos(cfg, seed)):
        torch.manual_seed(seed * 1000 + k)
        model = ResNet8(cfg["driving.image-size"], cfg["driving.channels"])
        train_steering(
            model,
            s.x_train,
            s.y_train,
            epochs=cfg["num-server-rounds"] * cfg["driving.local-epochs"],
            optim=LocalOptimizer(lr=cfg["driving.lr"]),
            batch_size=cfg["driving.batch-size"],
            seed=seed * 1000 + k,
        )
        aucs.append(
            membership_auc(
                per_sample_loss(model, s.x_train, s.y_train),
                per_sample_loss(model, s.x_test, s.y_test),
                rng,
            )
        )
    return {
        "auc": float(np.mean([a for a, _ in aucs])),
        "auc_shuffled": float(np.mean([b for _, b in aucs])),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--runs", default=str(FRONTIER), help="dp_frontier's runs folder")
    ap.add_argument("--results-dir", default=str(RESULTS))
    ap.add_argument("--force", action="store_true", help="overwrite committed results")
    plot_only_flag(ap)
    a = ap.parse_args(argv)
    runs_dir = Path(a.runs)
    outs = study_files(a.results_dir, "driving_membership")
    if a.plot_only:
        return redraw_study(outs, plot)
    refuse_overwrite(outs, a.force)
    frontier = pd.read_csv(RESULTS / "dp_frontier_runs.csv")
    rows = []
    for r in frontier[frontier["seed"].isin(a.seeds)].itertuples():
        run = (
            runs_dir / f"{r.mode}-{r.knob:g}-s{r.seed}"
            if r.mode != "none"
            else runs_dir / f"none-s{r.seed}"
        )
        if not (run / "config.json").is_file():
            print(
                f"driving_membership: {run} is missing; run `python -m experiments.study "
                "experiments/studies/dp_frontier.toml` first (it writes runs/dp_frontier)",
                file=sys.stderr,
            )
            return 2
        row = {"mode": r.mode, "knob": r.knob, "seed": r.seed, "epsilon": r.epsilon,
               "rmse": r.rmse, "stopped": r.stopped, **attack_run(run)}  # fmt: skip
        print(f"{run.name}: AUC {row['auc']:.3f} (shuffled {row['auc_shuffled']:.3f})", flush=True)
        rows.append(row)
    cfg = json.loads((runs_dir / f"none-s{a.seeds[0]}" / "config.json").read_text())
    for seed in a.seeds:
        alone = silo_alone(seed, {**cfg, "seed": seed})
        print(f"silo alone, seed {seed}: AUC {alone['auc']:.3f}", flush=True)
        rows.append({"mode": "silo alone (not released)", "knob": 0.0, "seed": seed,
                     "epsilon": 0.0, **alone})  # fmt: skip
    runs = pd.DataFrame(rows)
    t = summarize(runs)
    save_study(outs, runs, t, command_line(__file__, argv), plot)
    print(markdown(t))
    return 0


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (mode, knob), g in runs.groupby(["mode", "knob"], sort=False):
        out.append(
            {
                "mode": mode,
                "knob": knob,
                "seeds": len(g),
                "epsilon": float(g["epsilon"].mean()),
                "rmse": mean_sd(g["rmse"].dropna(), 3) if "rmse" in g else "",
                "stopped": int(g["stopped"].fillna(False).astype(bool).sum())
                if "stopped" in g
                else 0,
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for mode, marker in (("central", "o"), ("local", "^")):
        g = runs[runs["mode"] == mode].groupby("epsilon")["auc"]
        ax.errorbar(g.mean().index, g.mean(), yerr=g.std().fillna(0), fmt=f"{marker}-",
                    capsize=3, label=f"{mode} DP")  # fmt: skip
    for mode, style, label in (("none", "-", "no DP (ε = ∞)"),
                               ("silo alone (not released)", "--", "a silo's own model, if released")):  # fmt: skip
        v = runs.loc[runs["mode"] == mode, "auc"]
        if len(v):
            ax.axhline(v.mean(), ls=style, color="black" if mode == "none" else "grey", label=label)
    ax.axhline(runs["auc_shuffled"].mean(), ls=":", color="red", label="chance (labels shuffled)")
    ax.set(xscale="log", xlabel="ε at δ = 1e-5 (after all rounds)", ylabel="membership ROC AUC",
           title="Loss-threshold membership inference on the global model")  # fmt: skip
    ax.legend(fontsize=7)
    fig.tight_layout()
    figures.save(fig, png, command)


if __name__ == "__main__":
    sys.exit(main())
