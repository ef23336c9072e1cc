"""Why CDL's silos break down under party-side DP (docs/privacy.md, issue 44): each silo's final
released model from the frontier `experiments/studies/dp_frontier_cdl.toml` re-scored on the
pooled test set with its BatchNorm running statistics replaced, the weights untouched.

    python -m experiments.study experiments/studies/dp_frontier_cdl_bn.toml

The study file names the frontier's rows (`setting`, its run folders' prefix), seeds and runs
folder; each (setting, seed) is one call of `diagnose_run`, and `report` writes the tables.

Per silo: RMSE as released (the frontier's number); with block 0's first BatchNorm (bn1, the
layer with the smallest running variances, ~0.002-0.01 a channel) re-estimated on the silo's own
training images, which removes the noise the release put on that layer's statistics; with every
BatchNorm re-estimated on its own images; and, as a diagnostic only (it uses the other silos'
images, which no silo holds), every BatchNorm on the pooled training images, which removes the
non-IID mismatch of statistics fit to one silo's images. Also how many running variances the
release noised down to the 1e-5 floor (strategies/dp.py VAR_FLOOR, applied where CDL's relay
takes a local-DP release: strategies/decentralized.py) and below 1e-3; as a control, block 0's
bn1 restored on its floored channels only, and how much the floor scaled those channels up.
Second output, <out>_rounds.csv: bn1's running variances in the server's round checkpoints.
A silo "breaks down" when its RMSE as released is above 0.35 (the no-DP silos' worst is 0.41
in seed 0: the threshold only sorts the rows, every silo is written).

Writes experiments/results/dp_frontier_cdl_bn.csv (one row per run and silo) and
dp_frontier_cdl_bn_rounds.csv (one row per run and round); no figure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.simulate import RESULTS

BROKEN = 0.35


def diagnose(run: Path, seed: int) -> list[dict]:
    import torch

    from config import parse
    from envs.driving_silos import make_silo
    from models.resnet8 import ResNet8
    from strategies.dp import VAR_FLOOR
    from training.steering import estimate_statistics, evaluate_steering

    d = parse({}).driving
    files = sorted((run / "checkpoints").glob("final_silo_*.pt"))
    if not files:
        raise FileNotFoundError(
            f"{run}/checkpoints: no final_silo_*.pt (run the frontier first: python -m "
            "experiments.study experiments/studies/dp_frontier_cdl.toml)"
        )
    if "blocks.0.bn1.running_var" not in torch.load(files[0], weights_only=True):
        raise ValueError(
            f"cdl_dp_diagnosis: {run} kept BatchNorm statistics local: nothing was released "
            "to diagnose"
        )
    silos = [
        make_silo(i, seed, d.train_per_silo, d.test_per_silo, d.image_size, d.channels)
        for i in range(len(files))
    ]
    xt = np.concatenate([s.x_test for s in silos])
    yt = np.concatenate([s.y_test for s in silos])
    pooled = np.concatenate([s.x_train for s in silos])
    rows = []
    for i, (f, silo) in enumerate(zip(files, silos)):
        state = torch.load(f, weights_only=True)

        def model():
            m = ResNet8(d.image_size, d.channels)
            m.load_state_dict(state)
            return m.eval()

        def rmse(m) -> float:
            return float(np.sqrt(evaluate_steering(m, xt, yt)[0]))

        var = torch.cat([v.flatten() for k, v in state.items() if k.endswith("running_var")])
        row = {"run": run.name, "seed": seed, "silo": i, "as_released": rmse(model())}
        for col, x, only in (
            ("block0_bn1_own", silo.x_train, "blocks.0.bn1"),
            ("every_bn_own", silo.x_train, None),
            ("every_bn_pooled", pooled, None),
        ):
            row[col] = rmse(estimate_statistics(model(), x, only))
        # control: only the floored channels of block 0's bn1 get their own-data statistics
        m = model()
        with torch.no_grad():
            h = m.pool(m.stem(torch.as_tensor(silo.x_train)))
        true_var, true_mean = h.var(dim=(0, 2, 3)), h.mean(dim=(0, 2, 3))
        bn = m.blocks[0].bn1
        floored = bn.running_var <= VAR_FLOOR * 1.01
        # BatchNorm divides by sqrt(var + eps): how much a floored channel is scaled up
        amp = torch.sqrt((true_var + bn.eps) / (bn.running_var + bn.eps))[floored]
        bn.running_var[floored], bn.running_mean[floored] = true_var[floored], true_mean[floored]
        row["block0_bn1_floored_only"] = rmse(m) if bool(floored.any()) else row["as_released"]
        row["block0_bn1_max_amplification"] = float(amp.max()) if len(amp) else 1.0
        row["vars_at_floor"] = int((var <= VAR_FLOOR * 1.01).sum())
        row["vars_below_1e-3"] = int((var < 1e-3).sum())
        row["block0_bn1_min_var"] = float(state["blocks.0.bn1.running_var"].min())
        row["broken"] = row["as_released"] > BROKEN
        rows.append(row)
        print(row, flush=True)
    return rows


def bn1_by_round(run: Path) -> list[dict]:
    """Block 0's bn1 running variances round by round in the server's round checkpoints (the
    mean of what the silos released that round): how far the statistics still have to travel
    when the noise arrives."""
    import torch

    rows = []
    for f in sorted((run / "checkpoints").glob("round_*.pt")):
        v = torch.load(f, weights_only=True)["blocks.0.bn1.running_var"]
        rows.append({"run": run.name, "round": int(f.stem.split("_")[1]),
                     "bn1_var_median": float(v.median()), "bn1_var_min": float(v.min())})  # fmt: skip
    return rows


def diagnose_run(setting: str, seed: int, work: Path) -> list[dict]:
    """One frontier run's rows for both tables (`table`: "silos" or "rounds"), one torch thread
    as the frontier's own scoring."""
    import torch

    torch.set_num_threads(1)
    run = Path(work) / f"{setting}-s{seed}"
    return [r | {"table": "silos"} for r in diagnose(run, seed)] + [
        r | {"table": "rounds"} for r in bn1_by_round(run)
    ]


def outputs(study: dict) -> list[Path]:
    return [RESULTS / f"{study['name']}.csv", RESULTS / f"{study['name']}_rounds.csv"]


def report(runs: pd.DataFrame, study: dict, command: str) -> str:
    """The two CSVs (each row naming the command) and the means by setting and breakdown."""
    silos, rounds = (
        runs[runs["table"] == t].drop(columns="table").dropna(axis=1, how="all")
        for t in ("silos", "rounds")
    )
    for df, out in zip((silos, rounds), outputs(study)):
        out.parent.mkdir(parents=True, exist_ok=True)
        df.assign(command=command).to_csv(out, index=False, float_format="%.4g")
    cols = ["as_released", "block0_bn1_own", "block0_bn1_floored_only", "every_bn_own",
            "every_bn_pooled", "vars_at_floor"]  # fmt: skip
    return (
        silos.assign(setting=silos["run"].str.rsplit("-s", n=1).str[0])
        .groupby(["setting", "broken"])[cols].mean().round(3).to_string()
    )  # fmt: skip


def replot(study: dict) -> int:
    print(f"{study['name']}: tables only, no figure to draw", file=sys.stderr)
    return 2
