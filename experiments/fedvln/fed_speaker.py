"""Why the federated speaker did not ground (issue 41): its route fidelity against the
sequential optimizer steps it made, for the federated schedules tried, beside the centralized
grounded speaker of the pipeline.

    python -m experiments.fedvln.fed_speaker            # run what is missing, then summarize
    python -m experiments.fedvln.fed_speaker --summarize-only

Each schedule is one `simulation.py fedvln --stage speaker` run, seed 0, to a fixed round cap
(no patience), in runs/fedvln-speaker-fed/<name>-s<seed> (resumable). A round's sequential
steps are the local steps of one house (summed local steps / houses that trained), so a
federated and a centralized curve are compared at the same number of updates one after the
other. Written: experiments/results/fedvln_fed_speaker.csv (best and last val_seen fidelity
per schedule, with the val_unseen fidelity of the same evaluation) and its figure.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.simulate import RESULTS, ROOT, simulate

# name: (run config beyond the speaker stage and a fixed budget, round cap, eval every)
SCHEDULES = {
    "r0.2": ("", 240, 6),  # the paper's share of houses: 2 of 12 a round, tau = 5
    "r0.2-tau1": ("fedvln.speaker-epochs=1", 375, 15),
    "r0.2-lr2e-4": ("fedvln.lr=0.0002", 290, 10),
    "r0.5": ("fedvln.seen-rate=0.5", 130, 5),  # 6 of 12 houses a round
}
CENTRAL = ROOT / "runs" / "fedvln" / "seed{seed}" / "central" / "speaker_log.csv"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "runs" / "fedvln-speaker-fed"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--schedules", nargs="+", default=list(SCHEDULES), choices=list(SCHEDULES))
    p.add_argument("--summarize-only", action="store_true")
    p.add_argument("--results-dir", default=str(RESULTS))
    return p.parse_args(argv)


def run(out: Path, name: str, seed: int) -> Path:
    """One schedule's run (experiments.simulate: reused when finished, resumed when not)."""
    extra, rounds, every = SCHEDULES[name]
    rc = f'fedvln.stage="speaker" eval-every={every} fedvln.patience=0 {extra}'.strip()
    return simulate("fedvln", out / f"{name}-s{seed}", rounds=rounds, seed=seed, run_config=rc)


def curve(run_dir: Path) -> pd.DataFrame:
    """Evaluated rounds with their sequential steps (one house's local steps, cumulated)."""
    df = pd.read_csv(run_dir / "rounds.csv")
    df["seq_steps"] = (df["local_steps"] / df["n_clients"]).cumsum()
    return df[df["val_seen_fidelity"].notna()].reset_index(drop=True)


def central_curve(seed: int) -> pd.DataFrame | None:
    f = Path(str(CENTRAL).format(seed=seed))
    if not f.is_file():
        return None
    return pd.read_csv(f).rename(columns={"iteration": "seq_steps"})


def floor_fidelity(floor: str) -> float:
    """A floor's val_unseen route fidelity on the embedded houses (mean over its seeds), from
    `experiments.fedvln.speaker_floors`' committed table."""
    t = pd.read_csv(RESULTS / "fedvln_speaker_floors.csv")
    hit = t[(t["data"] == "embedded houses") & (t["floor"] == floor) & (t["split"] == "val_unseen")]
    return float(str(hit["fidelity"].iloc[0]).split(" ± ")[0])


def row(name: str, df: pd.DataFrame, houses: str) -> list[dict]:
    best = df.loc[df["val_seen_fidelity"].idxmax()]
    last = df.iloc[-1]
    return [
        {
            "schedule": name,
            "houses_per_round": houses,
            "checkpoint": ck,
            "seq_steps": int(r["seq_steps"]),
            "val_seen_fidelity": round(float(r["val_seen_fidelity"]), 1),
            "val_unseen_fidelity": round(float(r["val_unseen_fidelity"]), 1),
            "val_unseen_goal_room": round(float(r["val_unseen_goal_room"]), 1),
            "val_unseen_bleu": round(float(r["val_unseen_bleu"]), 1),
            "seq_steps_cap": int(df["seq_steps"].iloc[-1]),
        }
        for ck, r in (("best", best), ("last", last))
    ]


def main(argv=None) -> int:
    a = parse_args(argv)
    out, rows, curves = Path(a.out), [], {}
    for name in a.schedules:
        run_dir = out / f"{name}-s{a.seed}"
        if not a.summarize_only:
            run(out, name, a.seed)
        if not (run_dir / "rounds.csv").is_file():
            print(f"{run_dir}: no run yet (run without --summarize-only)")
            continue
        df = pd.read_csv(run_dir / "rounds.csv")
        curves[name] = curve(run_dir)
        rows += row(name, curves[name], f"{np.mean(df['n_clients']):g}")
    central = central_curve(a.seed)
    if central is not None:
        curves["centralized"] = central
        rows += row("centralized", central, "pooled")
    if not rows:
        return 1
    table = pd.DataFrame(rows)
    dest = Path(a.results_dir) / "fedvln_fed_speaker"
    table.to_csv(dest.with_suffix(".csv"), index=False)
    print(table.to_string(index=False))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, df in curves.items():
        ax.plot(df["seq_steps"], df["val_unseen_fidelity"], label=name)
    for floor, style in (("constant", ":"), ("other path", "-.")):
        ax.axhline(floor_fidelity(floor), color="grey", ls=style, label=f"{floor} (floor)")
    ax.set(
        xlabel="sequential optimizer steps",
        ylabel="val_unseen route fidelity",
        title=f"FedVLN speaker: federated schedules vs centralized (seed {a.seed})",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dest.with_suffix(".png"), dpi=110)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
