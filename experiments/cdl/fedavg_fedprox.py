"""FedAvg vs FedProx on the embedded non-IID driving silos, and Flower's overhead per round.

    python -m experiments.study experiments/studies/driving_fedavg_fedprox.toml

The study file runs both methods through simulation.py (Flower's simulation engine, as a user
would; the study kind "simulation"); this is its analysis. It
reports per method: the RMSE/MAE reached, and the overhead ratio = median over rounds of the
round's wall time divided by the sum of its clients' local training time (fit_s), both measured
in the same run. With 2 ClientApps in parallel on 2 cores a ratio below 1 is possible; above 1
it is what orchestration, evaluation and data loading cost on top of training.
For scale it also trains one model centrally on the pooled data (as many epochs as a client
trains in the whole run) and scores the constant predictor.
Writes experiments/results/<name>.csv (summary), <name>_rounds.csv (per round) and <name>.png
(RMSE per round).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments import figures
from experiments.simulate import RESULTS
from experiments.simulation_runs import overrides
from experiments.tables import redraw


def centralized_reference(rounds: int, num_clients: int, run_config: str, seed: int) -> dict:
    """The yardsticks, on the same silos: one model trained on the pooled training data of all
    silos for as many epochs as a client trains in the whole federated run (no privacy), and
    the constant predictor (the pooled training mean)."""
    import numpy as np
    import torch

    from config import parse
    from config.schema import parse_overrides
    from envs.driving_silos import make_silo
    from models.resnet8 import ResNet8
    from training.steering import LocalOptimizer, evaluate_steering, train_steering

    d = parse(parse_overrides(run_config)).driving
    size, ch = d.image_size, d.channels
    silos = [
        make_silo(i, seed, d.train_per_silo, d.test_per_silo, size, ch) for i in range(num_clients)
    ]
    x = np.concatenate([s.x_train for s in silos])
    y = np.concatenate([s.y_train for s in silos])
    xt = np.concatenate([s.x_test for s in silos])
    yt = np.concatenate([s.y_test for s in silos])
    torch.manual_seed(seed)
    torch.set_num_threads(2)
    model = ResNet8(size, ch)
    epochs = rounds * d.local_epochs
    train_steering(
        model,
        x,
        y,
        epochs=epochs,
        optim=LocalOptimizer(lr=d.lr),
        batch_size=d.batch_size,
        seed=seed,
    )
    mse, mae = evaluate_steering(model, xt, yt)
    const = float(y.mean())
    return {
        "seed": seed,
        "centralized_rmse": float(np.sqrt(mse)),
        "centralized_mae": mae,
        "constant_rmse": float(np.sqrt(np.mean((yt - const) ** 2))),
        "constant_mae": float(np.mean(np.abs(yt - const))),
        "centralized_epochs": epochs,
    }


def per_round(run_dir: Path, method: str, seed: int) -> pd.DataFrame:
    rounds = pd.read_csv(run_dir / "rounds.csv")
    clients = pd.read_csv(run_dir / "clients.csv")
    fit = clients.groupby("round")["fit_s"].sum().rename("sum_fit_s")
    df = rounds.merge(fit, left_on="round", right_index=True)
    df["overhead_ratio"] = df["wall_s"] / df["sum_fit_s"]
    df.insert(0, "seed", seed)
    df.insert(0, "method", method)
    return df


def outputs(study: dict) -> list[Path]:
    return [RESULTS / f"{study['name']}{sfx}" for sfx in (".csv", "_rounds.csv", ".png")]


def check(cell: dict, where) -> None:
    if cell["method"] not in ("fedavg", "fedprox") or cell.get("num-clients") is None:
        raise ValueError(f"{where}: grid.methods: fedavg and fedprox, with grid.num-clients")


def report(runs: pd.DataFrame, study: dict, command: str) -> str:
    """Per method: the RMSE/MAE reached, the overhead ratio, and the yardsticks beside."""
    frames = [per_round(Path(r.run_dir), r.method, r.seed) for r in runs.itertuples()]
    rounds = pd.concat(frames, ignore_index=True)
    one = runs.iloc[0]
    n_rounds, clients, cfg = int(one["rounds"]), int(one["num-clients"]), one["run-config"]
    seeds = sorted(set(runs.seed))
    refs = pd.DataFrame(
        [centralized_reference(n_rounds, clients, overrides(cfg), s) for s in seeds]
    )
    print(refs.to_string(index=False), flush=True)
    last = rounds[rounds["round"] == rounds["round"].max()]
    summary = (
        last.groupby("method")
        .agg(
            rmse=("rmse", "mean"),
            rmse_sd=("rmse", "std"),
            mae=("mae", "mean"),
            silo_rmse_mean=("silo_rmse_mean", "mean"),
        )
        .reset_index()
    )
    # the first round includes Ray's start-up and the identity query; report both
    steady = rounds[rounds["round"] > 1].groupby("method")
    summary = summary.merge(steady["wall_s"].median().rename("median_wall_s"), on="method")
    summary = summary.merge(steady["sum_fit_s"].median().rename("median_sum_fit_s"), on="method")
    summary["overhead_ratio"] = summary["median_wall_s"] / summary["median_sum_fit_s"]
    first = rounds[rounds["round"] == 1].groupby("method")["wall_s"].median()
    summary = summary.merge(first.rename("round1_wall_s"), on="method")
    ref_rows = pd.DataFrame(
        [
            {
                "method": f"centralized ({int(refs.centralized_epochs.iloc[0])} epochs, pooled data)",
                "rmse": refs.centralized_rmse.mean(),
                "rmse_sd": refs.centralized_rmse.std(),
                "mae": refs.centralized_mae.mean(),
            },
            {
                "method": "constant (pooled train mean)",
                "rmse": refs.constant_rmse.mean(),
                "rmse_sd": refs.constant_rmse.std(),
                "mae": refs.constant_mae.mean(),
            },
        ]
    )
    summary = pd.concat([summary, ref_rows], ignore_index=True)
    summary.insert(1, "rounds", n_rounds)
    summary.insert(2, "silos", clients)
    summary.insert(3, "seeds", len(seeds))
    out_csv, rounds_csv, png = outputs(study)
    RESULTS.mkdir(parents=True, exist_ok=True)
    summary = summary.assign(command=command)
    summary.to_csv(out_csv, index=False, float_format="%.4f")
    rounds.to_csv(rounds_csv, index=False, float_format="%.4f")
    draw(rounds, summary, png, clients, command)
    return summary.drop(columns="command").to_string(index=False, float_format=lambda v: f"{v:.4f}")


def draw(
    rounds: pd.DataFrame, summary: pd.DataFrame, png: Path, num_clients: int, command: str
) -> None:
    """RMSE per round, mean and sd over seeds (FedAvg and FedProx side by side, not on top of
    each other), our centralized and constant yardsticks, and the CDL paper's FedAvg and
    FedProx RMSE (Udacity+, their silos: another data set, drawn for scale)."""
    from matplotlib.ticker import MaxNLocator

    from experiments.cdl.driving_table import PAPER_RMSE

    fig, ax = figures.subplots(figsize=(6.4, 4))
    styles = {"fedavg": ("o", "-", -0.06, "tab:blue"), "fedprox": ("s", "--", 0.06, "tab:orange")}
    for method, part in rounds.groupby("method"):
        marker, line, dx, color = styles.get(method, ("^", "-", 0.0, None))
        m = part.groupby("round")["rmse"].agg(["mean", "std"]).fillna(0)
        ax.errorbar(
            m.index + dx,
            m["mean"],
            yerr=m["std"],
            marker=marker,
            ls=line,
            capsize=3,
            color=color,
            label=f"{method} (ours, {part.seed.nunique()} seeds)",
        )
        paper = PAPER_RMSE.get(method)
        if paper is not None:
            ax.axhline(
                paper, color=color, ls=":", lw=1.2, label=f"{method} paper {paper} (Udacity+)"
            )
    refs = summary.set_index("method")["rmse"]
    for prefix, style in (("centralized", "--"), ("constant", "-.")):
        row = [k for k in refs.index if k.startswith(prefix)]
        if row:
            ax.axhline(refs[row[0]], color="grey", ls=style, label=f"{row[0]} (ours)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel("RMSE of steering (rad), pooled test set")
    ax.set_title(f"FedAvg vs FedProx, {num_clients} non-IID driving silos")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    figures.save(fig, png, command)


def replot(study: dict) -> int:
    """The figure again from the committed CSVs (no run), under the command that made them."""
    csv, rounds_csv, png = outputs(study)

    def again(summary: pd.DataFrame, command: str) -> None:
        draw(pd.read_csv(rounds_csv), summary, png, int(summary.silos.iloc[0]), command)

    return redraw(csv, again)
