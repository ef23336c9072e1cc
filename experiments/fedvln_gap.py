"""Where the gap between FedEnvdrop and centralized Envdrop comes from, at an equal number of
optimizer steps: the federated agent stage with the same steps per round spread over more
houses, beside the pipeline's default federated and centralized runs.

    python -m experiments.fedvln_gap                       # embedded houses, seeds 0 1 2

Runs (each `simulation.py fedvln --stage agent`, 30 rounds, in runs/fedvln-gap/<name>-s<seed>):

| name | houses per round | local epochs | steps per round | local optimizer |
|---|---|---|---|---|
| default (the pipeline's agent stage) | 2 (r = 0.2) | 3 | 2 x 12 = 24 | fresh each round |
| all-houses | 12 (r = 1.0) | 0.5 | 12 x 2 = 24 | fresh each round |
| kept-optimizer | 2 (r = 0.2) | 3 | 2 x 12 = 24 | kept in the house |
| kept-optimizer-eta2 | 2 (r = 0.2) | 3 | 2 x 12 = 24 | kept, server lr eta = 2 |
| all-houses-kept | 12 (r = 1.0) | 0.5 | 12 x 2 = 24 | kept in the house |
| all-houses-kept-eta2 | 12 (r = 1.0) | 0.5 | 12 x 2 = 24 | kept, server lr eta = 2 |

Centralized Envdrop (24 steps per "round" on pooled data) and the default federated run come
from `experiments.fedvln_pipeline`'s runs (runs/fedvln/seed<S>), which must exist. If spreading
the same steps over every house closes the gap, the gap is client drift from training 2
non-IID houses per round; keeping each house's RMSprop state between rounds
(`fedvln.optimizer-state=house`) tests the other suspect: a fresh RMSprop has no bias
correction, so its first steps are up to 10x lr, and with a few local steps per round every
step is one of them. The eta = 2 rows are the server learning rate done as the official code
means it (its one RMSprop carries its state across houses and rounds): with a fresh optimizer
every round, eta = 2 doubled those first large steps and diverged (issue 32). A last row cuts the centralized curve at the federated run's sequential
steps (rounds x one house's local steps): averaging K houses that each took s steps from the
same model moves it about as far as s steps on K times the batch, not K x s steps. Best
(highest val_unseen SR) and last evaluation, mean and sd over seeds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.fedvln_pipeline import curve, pick
from experiments.simulate import RESULTS, ROOT, simulate

ALL = "fedvln.seen-rate=1.0 fedvln.local-epochs=0.5"
KEEP = 'fedvln.optimizer-state="house"'
ETA2 = "fedvln.server-lr=2.0"  # the official eta (the cpu recipe's is 1)
VARIANTS = {  # run folder name: (row label, run config)
    "all-houses": ("all houses (12 x 2 steps), fresh optimizer", ALL),
    "kept-optimizer": ("2 houses x 12 steps, optimizer kept in the house", KEEP),
    "kept-optimizer-eta2": ("2 houses x 12 steps, optimizer kept, eta = 2", f"{KEEP} {ETA2}"),
    "all-houses-kept": ("all houses (12 x 2 steps), optimizer kept", f"{ALL} {KEEP}"),
    "all-houses-kept-eta2": (
        "all houses (12 x 2 steps), optimizer kept, eta = 2",
        f"{ALL} {KEEP} {ETA2}",
    ),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--rounds", type=int, default=30, help="as the pipeline's --agent-rounds")
    p.add_argument("--eval-every", type=int, default=3, help="as the pipeline's --eval-every")
    p.add_argument(
        "--variants",
        nargs="+",
        default=list(VARIANTS),
        choices=list(VARIANTS),
        help="federated variants to run beside the pipeline's default and centralized runs",
    )
    p.add_argument("--pipeline-out", default=str(ROOT / "runs" / "fedvln"))
    p.add_argument("--results-dir", default=str(RESULTS))
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    base, pipe = ROOT / "runs" / "fedvln-gap", Path(a.pipeline_out)
    rows = []
    for seed in a.seeds:
        runs = {
            "centralized (pooled data)": (pipe / f"seed{seed}", "central/agent"),
            "2 houses x 12 steps, fresh optimizer (pipeline)": (pipe / f"seed{seed}", "agent"),
        }
        for name in a.variants:
            label, rc = VARIANTS[name]
            run = base / f"{name}-s{seed}"
            simulate(
                "fedvln",
                run,
                rounds=a.rounds,
                seed=seed,
                run_config=f'fedvln.stage="agent" eval-every={a.eval_every} {rc}',
            )
            runs[label] = (run.parent, run.name)
        curves = {}
        for name, (out, run) in runs.items():
            df = curve(out, run)
            if df is None or not len(df):
                raise SystemExit(
                    f"fedvln_gap: {out / run} is missing or unfinished; run "
                    f"`python -m experiments.fedvln_pipeline` first"
                )
            curves[name] = df
        # the federated run's sequential steps: rounds x one house's local steps per round
        fed = pd.read_csv(pipe / f"seed{seed}" / "agent" / "rounds.csv").query("round > 0")
        sequential = int(a.rounds * (fed["local_steps"] / fed["n_clients"]).median())
        cent = curves["centralized (pooled data)"]
        curves[f"centralized, first {sequential} steps (the federated run's sequential steps)"] = (
            cent[cent["steps"] <= sequential].reset_index(drop=True)
        )
        for name, df in curves.items():
            for ck, r in pick(df, "val_unseen_sr").items():
                rows.append(
                    {
                        "run": name,
                        "checkpoint": ck,
                        "seed": seed,
                        "steps": int(r["steps"]),
                        "val_unseen_sr": r["val_unseen_sr"],
                        "val_seen_sr": r.get("val_seen_sr", np.nan),
                    }
                )
    df = pd.DataFrame(rows)
    table = (
        df.groupby(["run", "checkpoint"], sort=False)
        .agg(
            n_seeds=("seed", "size"),
            steps=("steps", "mean"),
            val_unseen_sr=("val_unseen_sr", "mean"),
            val_unseen_sr_sd=("val_unseen_sr", "std"),
            val_seen_sr=("val_seen_sr", "mean"),
            val_seen_sr_sd=("val_seen_sr", "std"),
        )
        .reset_index()
    )
    dest = Path(a.results_dir)
    dest.mkdir(parents=True, exist_ok=True)
    table.round(2).to_csv(dest / "fedvln_gap.csv", index=False)
    df.round(2).to_csv(dest / "fedvln_gap_runs.csv", index=False)
    print(table.round(1).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
