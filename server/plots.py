"""The plots of a run, written by the ServerApp itself when the run ends (so plain `flwr run .`
gets them too), and by `python -m experiments.plot` to overlay several runs.

`summary.png`: the run's headline metrics in one figure. `<metric>.png`: one per metric column
of rounds.csv, each run a line. Left out: bookkeeping columns (wall time, bytes, counts of
clients, messages, steps and examples, FedRL's privacy ledger counters: they stay in
rounds.csv), and a metric equal to one already plotted in every run (FedAvg's `silo_mae_mean` is
`mae`: every silo evaluates the same global model). Titles say what is measured on what; axes
carry units and whole rounds; VLN abbreviations are spelled out.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from config.papers import PAPER, run_paper_values  # noqa: E402
from contracts.messages import CD_LOSS  # noqa: E402
from strategies.floors import FLOOR  # noqa: E402

NOT_METRICS = {
    "round",
    "stage",
    "wall_s",
    "bytes_up",
    "bytes_down",
    "eval_bytes_down",
    "n_clients",
    "n_accepted",
    "n_eval_silos",
    "messages",
    "env-steps",
    "updates",
    "train-samples",
    "train-episodes",
    "local_steps",
    "server_lr",
    "exploration",
    "best-round",
}
# metric name (or its ending) -> (what is measured on what, unit)
MEANINGS = [
    ("silo_rmse_mean", "steering RMSE on each silo's own test set, mean over silos", "rad"),
    ("silo_mae_mean", "steering MAE on each silo's own test set, mean over silos", "rad"),
    ("avg_rmse", "steering RMSE, average of the silos' models on the pooled test set", "rad"),
    ("avg_mae", "steering MAE, average of the silos' models on the pooled test set", "rad"),
    ("silo_rmse_own_mean", "steering RMSE of each silo's model on its own test set, mean", "rad"),
    ("silo_mae_own_mean", "steering MAE of each silo's model on its own test set, mean", "rad"),
    (
        "silo_rmse_pooled_mean",
        "steering RMSE of each silo's model on the pooled test set, mean",
        "rad",
    ),
    (
        "silo_mae_pooled_mean",
        "steering MAE of each silo's model on the pooled test set, mean",
        "rad",
    ),
    (CD_LOSS, "CDL's contrastive-divergence loss L_cd+ (Eq. 5), mean over silos", "nats"),
    ("cd_loss", "CDL's contrastive-divergence loss L_cd+ (Eq. 5), mean over silos", "nats"),
    (
        "cd_grad_ratio",
        "backbone gradient norm of L_cd+ over that of the MSE, first minibatch",
        "ratio",
    ),
    ("pb_entropy", "entropy of the backbone's softened output P_b, first minibatch", "nats"),
    ("rmse", "steering RMSE, global model on the pooled test set", "rad"),
    ("mae", "steering MAE, global model on the pooled test set", "rad"),
    ("train_loss", "training loss (the local objective), mean over the round's clients", "loss"),
    ("consensus", "consensus: mean squared deviation of the silos' parameters", "param²"),
    (
        "privacy-epsilon",
        "privacy the party spent on its training records, as the server counts it (RDP)",
        "ε",
    ),
    (
        "claimed-eval-epsilon",
        "privacy the party claims on its evaluation records (its own ledger)",
        "ε",
    ),
    (
        "eval-epsilon",
        "privacy the party spent on its evaluation records, as the server counts it",
        "ε",
    ),
    ("claimed-epsilon", "privacy the party claims on its training records (its own ledger)", "ε"),
    ("dp_epsilon_claimed", "privacy the parties claim (the largest claim, their own ledgers)", "ε"),
    (
        "dp_epsilon",
        "privacy spent so far (the server's accountant or its count of releases, delta 1e-5)",
        "ε",
    ),
    ("dp_clip_next", "central DP, adaptive clipping: the C the next round clips to", "L2 norm"),
    ("dp_clip", "central DP: the C this round's updates were clipped to", "L2 norm"),
    ("_sr", "success rate (stops within 3 m of the goal)", "%"),
    ("_osr", "oracle success rate (passes within 3 m of the goal)", "%"),
    ("_spl", "success weighted by path length", "%"),
    ("_ndtw", "normalised dynamic time warping to the reference path", "%"),
    ("_sdtw", "success-weighted dynamic time warping", "%"),
    ("_cls", "coverage weighted by length score", "%"),
    ("_ne", "navigation error (distance to the goal at the stop)", "m"),
    ("_tl", "trajectory length", "m"),
    ("_bleu", "speaker BLEU-4 against the human instructions", "BLEU-4"),
    # training episodes act epsilon-greedily, and only those that ended in the round are counted
    # (early in a run that is mostly the ones that met the goal; issue 66)
    (
        "train-succ-rate",
        "success rate of the epsilon-greedy episodes that ended in the round (running ones not counted)",
        "fraction of episodes",
    ),
    (
        "train-avg-reward",
        "mean reward of the epsilon-greedy episodes that ended in the round",
        "reward points",
    ),
    ("succ-rate", "success rate of the greedy policy", "fraction of episodes"),
    ("reward", "mean episode reward of the greedy policy", "reward points"),
    ("f1", "F1 of the extracted actions", "F1 (0-1)"),
]
# the local objective's unit, by domain (FedProx adds mu/2 |w - w_g|^2, CDL beta L_cd+)
LOSS_UNITS = {"driving": "rad² (MSE + the method's terms)", "vln": "nats (cross-entropy)"}
SPLITS = {
    "val_unseen": "val unseen houses",
    "val_seen": "val seen houses",
    "best-valid": "valid split, kept checkpoint",
    "best-test": "test split, kept checkpoint",
    "valid": "valid split",
    "test": "test split",
    "train-": "training episodes",
}
# what to put in summary.png first, by name ending
HEADLINE = (  # a peer method's RMSE first: "rmse" also ends avg_rmse, its averaged model
    "silo_rmse_pooled_mean",  # a peer method's (it has no global model: strategies/floors.py)
    "silo_rmse_own_mean",
    "rmse",
    "mae",
    "val_unseen_sr",
    "val_unseen_spl",
    "bleu",
    "succ-rate",
    "f1",
    "reward",
)


# a floor column (`floor-<metric>`) is drawn on its metric's plot, not on its own, as
# FLOORS[its prefix] (strategies/floors.py); every run plot shows what a trivial output scores
FLOORS = {  # by a part of the metric's name
    "rmse": "floor: the best constant output (the test labels' sd)",
    "succ-rate": "floor: both agents moving at random",
    "reward": "floor: both agents moving at random",
    "f1": "floor: each word selected with p = 1/2",
}


def floor_of(metric: str, columns) -> tuple[str, str] | None:
    """(floor column, legend label) drawn on `metric`'s plot, None without one. A FedRL score
    at either checkpoint and test noise (`best-valid-succ-rate-test_noise=on`) has its split's
    floor (`floor-valid-succ-rate`)."""
    base = metric.split("-test_noise")[0].removeprefix("best-")
    for name in (FLOOR + metric, FLOOR + base):
        if name in columns:
            what = next((v for k, v in FLOORS.items() if k in base), "floor")
            if base.startswith("val_"):  # FedVLN (clients/fedvln_client._floor)
                what = "floor: the untrained model (its initial weights)"
            return name, what
    return None


def is_bookkeeping(column: str) -> bool:
    return (
        column in NOT_METRICS
        or column.endswith(("_n", "-releases", "_releases"))
        or column.startswith(("bytes", "n_", FLOOR, PAPER))
    )


def with_paper(df: pd.DataFrame, cfg: dict) -> pd.DataFrame:
    """The run's rounds with a `paper-<variant>:<score>` column for each paper value that
    applies to its settings (config/papers.py), drawn on that score's plots, not on their own."""
    values = run_paper_values(cfg)
    extra = {
        f"{PAPER}{label}:{score}": v for score, vs in values.items() for label, v in vs.items()
    }
    return df.assign(**extra) if extra else df


def paper_of(metric: str, columns) -> list[tuple[str, str]]:
    """[(column, variant)] of the paper values drawn on `metric`'s plot: a FedRL test score at
    either checkpoint and test noise has the paper's test score."""
    base = metric.split("-test_noise")[0].removeprefix("best-")
    return [
        (c, c[len(PAPER) :].split(":")[0])
        for c in columns
        if c.startswith(PAPER) and c.split(":", 1)[-1] == base
    ]


def meaning_of(metric: str, method: str = "") -> tuple[str, str]:
    """(what is measured on what, unit) of a rounds.csv column of a run of `method`; ("", "")
    if unknown."""
    base = metric.split("-test_noise")[0]
    party = re.match(r"(alpha|beta)-", base)  # a FedRL party's own figure
    bare = base[party.end() :] if party else base
    if base == "train_loss" and _domain(method) in LOSS_UNITS:
        return "training loss (the local objective), mean over the round's clients", LOSS_UNITS[
            _domain(method)
        ]
    for name, what, unit in MEANINGS:
        if base.endswith(name):  # the list runs from the specific to the general
            split = next((v for k, v in SPLITS.items() if bare.startswith(k)), "")
            noise = re.search(r"test_noise=(on|off)", metric)
            extra = [split] if split else []
            extra += [f"test noise {noise.group(1)}"] if noise else []
            return (f"{what} ({', '.join(extra)})" if extra else what), unit
    return "", ""


def _domain(method: str) -> str:
    from config import methods

    try:
        return methods.get(method).domain
    except Exception:  # an unknown or missing method
        return ""


def unit_of(metric: str) -> str:
    return meaning_of(metric)[1]


def run_label(run_dir: Path) -> str:
    cfg = run_config(run_dir)
    return f"{cfg.get('method', '?')} ({Path(run_dir).name})" if cfg else Path(run_dir).name


def run_config(run_dir: Path) -> dict:
    path = Path(run_dir) / "config.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        return {}


def load_rounds(run_dir: Path) -> pd.DataFrame:
    path = Path(run_dir) / "rounds.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (is {run_dir} a run folder?)")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a readable CSV ({e})") from None
    if "round" not in df.columns:
        raise ValueError(f"{path}: no 'round' column")
    return df


def config_differences(run_dirs: list[Path]) -> list[str]:
    """Run-config keys on which overlaid runs differ (bookkeeping keys aside), "key: a | b"."""
    cfgs = [run_config(d) for d in run_dirs]
    ignore = {"out-dir", "resume", "resume-round", "seed"}
    keys = sorted({k for c in cfgs for k in c} - ignore)
    return [
        f"{k}: " + " | ".join(str(c.get(k, "-")) for c in cfgs)
        for k in keys
        if len({json.dumps(c.get(k), sort_keys=True) for c in cfgs}) > 1
    ]


def _metrics(runs: list[tuple[str, pd.DataFrame]]) -> list[str]:
    """Metric columns in order, without one whose values equal an earlier one's in every run."""
    out: list[str] = []
    for _, df, _ in runs:  # headline metrics first: a duplicate of one is dropped, not it
        for c in sorted(df.columns, key=lambda c: not _headline(c)):
            if c in out or is_bookkeeping(c) or not pd.api.types.is_numeric_dtype(df[c]):
                continue
            if df[c].isna().all():
                continue
            same = any(
                all(
                    m in d.columns
                    and c in d.columns
                    and np.array_equal(d[m].to_numpy(), d[c].to_numpy(), equal_nan=True)
                    for _, d, _ in runs
                )
                for m in out
            )
            if not same:
                out.append(c)
    return out


def _headline(metric: str) -> bool:
    return metric.split("-test_noise")[0].endswith(HEADLINE)


def _draw(ax, runs, metric: str) -> None:
    rounds: set[int] = set()
    for label, df, _ in runs:
        if metric not in df.columns:
            continue
        stages = df["stage"].nunique() if "stage" in df else 1
        groups = df.groupby("stage", sort=False) if "stage" in df else [("", df)]
        for stage, part in groups:
            part = part[part[metric].notna()]
            if part.empty:
                continue
            name = label if stages <= 1 else f"{label} {stage}"
            (line,) = ax.plot(part["round"], part[metric], marker="o", ms=3, label=name)
            rounds.update(int(r) for r in part["round"])
            floor = floor_of(metric, part.columns)
            if floor and part[floor[0]].notna().any():
                what = floor[1]
                ax.plot(
                    part["round"],
                    part[floor[0]],
                    ls="--",
                    marker="_",  # a floor measured once (the test split) is a dash
                    ms=12,
                    color=line.get_color(),
                    alpha=0.7,
                    label=what if len(runs) == 1 else f"{name}: {what}",
                )
            for k, (column, variant) in enumerate(paper_of(metric, part.columns)):
                value = float(part[column].iloc[0])
                ax.axhline(
                    value,
                    ls=(0, (1, 1 + k)),  # dotted, a denser dot for the second variant
                    color=line.get_color(),
                    alpha=0.8,
                    label=f"paper ({variant}): {value:.4g}",
                )
    what, unit = meaning_of(metric, runs[0][2])
    ax.set_xlabel("round")
    if len(rounds) <= 12:  # few rounds (one, say): ticks at them, never at fractions
        ax.set_xticks(sorted(rounds))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"{metric} ({unit})" if unit else metric, fontsize=8)
    ax.set_title(textwrap.fill(what or metric, 48), fontsize=8)
    ax.grid(alpha=0.3)


def plot_runs(run_dirs: list[Path], out_dir: Path) -> list[Path]:
    """summary.png and one PNG per metric; the figures say which config keys differ."""
    configs = [run_config(Path(d)) for d in run_dirs]
    runs = [
        (run_label(Path(d)), with_paper(load_rounds(Path(d)), cfg), str(cfg.get("method", "")))
        for d, cfg in zip(run_dirs, configs)
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    differ = config_differences([Path(d) for d in run_dirs]) if len(runs) > 1 else []
    note = ("runs differ in " + "; ".join(differ))[:300] if differ else ""
    metrics = _metrics(runs)
    written = []
    for metric in metrics:
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        _draw(ax, runs, metric)
        ax.legend(fontsize=8)
        if note:
            fig.text(0.01, 0.005, note, fontsize=6, color="firebrick", wrap=True)
        fig.tight_layout(rect=(0, 0.04 if note else 0, 1, 1))
        path = out_dir / f"{metric}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    if metrics:
        written.insert(0, _summary(runs, metrics, out_dir / "summary.png", note))
    return written


def _summary(runs, metrics: list[str], path: Path, note: str) -> Path:
    first = [m for h in HEADLINE for m in metrics if m.split("-test_noise")[0].endswith(h)]
    chosen = list(dict.fromkeys(first + metrics))[:6]
    cols = min(3, len(chosen))
    rows = (len(chosen) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, chosen):
        _draw(ax, runs, metric)
    for ax in list(axes.flat)[len(chosen) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", fontsize=8)
    fig.suptitle(", ".join(label for label, _, _ in runs)[:120], fontsize=10, x=0.01, ha="left")
    if note:
        fig.text(0.01, 0.005, note, fontsize=7, color="firebrick", wrap=True)
    fig.tight_layout(rect=(0, 0.03 if note else 0, 0.9, 0.95))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
