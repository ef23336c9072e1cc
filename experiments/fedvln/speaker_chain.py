"""The federated speaker stage with the official code's chained round, as a user runs it (issue
64 item 1): does the chain ground the speaker in our Flower app, as it did in
experiments/fedvln/speaker_round.py's one-process study, where FedAvg does not?

    python -m experiments.study experiments/studies/fedvln_speaker_chain.toml [--jobs 2]

Each seed of an arm is one `simulation.py fedvln --stage speaker` run under
deploy/policies/research.toml (the secure default policy refuses a chained round: each house's
trained speaker goes to the next house of the round): `chain` with `fedvln.speaker-round =
"chain"`, `fedavg` its twin with the stage's default round, all else equal. The checkpoint kept
is the best val_seen route fidelity, as the stage keeps it; the last evaluation beside it.
Reported on val_unseen: route fidelity (strict, envs.vln_fidelity) and its parts, rooms on
route, goal room and stop object; floors beside, the constant sentence and the true words
and another path's words (experiments/results/fedvln_speaker_floors.csv) and the untrained speaker the run scores
itself (`floor-` columns of rounds.csv).

Writes experiments/results/fedvln_speaker_chain.csv (best and last, mean +- sd over seeds),
fedvln_speaker_chain_runs.csv (every evaluated round of every seed) and the figure.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments import figures
from experiments.fedvln.speaker_round import PARTS, draw_floors, floor_table
from experiments.simulate import RESULTS
from experiments.tables import mean_sd, pipe_table, redraw_study, save_study, study_files

COLUMNS = ["val_seen_fidelity", *(f"val_unseen_{k}" for k in PARTS), "floor-val_unseen_fidelity"]


def curves(runs: pd.DataFrame) -> pd.DataFrame:
    """Every evaluated round of every run: its round, fidelity and parts."""
    out = []
    for r in runs.itertuples():
        df = pd.read_csv(Path(r.run_dir) / "rounds.csv")
        df = df[df["val_seen_fidelity"].notna()]
        out.append(df[["round", *COLUMNS]].assign(seed=r.seed, label=r.label))
    return pd.concat(out, ignore_index=True)


def summarize(curve: pd.DataFrame) -> pd.DataFrame:
    """Best (val_seen fidelity) and last evaluation per seed, mean +- sd over seeds."""
    rows = []
    for label, g in curve.groupby("label", sort=False):
        for ck in ("best", "last"):
            picked = pd.DataFrame(
                [
                    d.loc[d["val_seen_fidelity"].idxmax()] if ck == "best" else d.iloc[-1]
                    for _, d in g.groupby("seed")
                ]
            )
            row = {"round": label, "checkpoint": ck, "seeds": len(picked),
                   "at_round": mean_sd(picked["round"], 0)}  # fmt: skip
            row |= {c: mean_sd(picked[c]) for c in COLUMNS}
            row["seeds_unseen_fidelity_ge_50"] = int((picked["val_unseen_fidelity"] >= 50).sum())
            row["seeds"] = int(row["seeds"])
            rows.append(row)
    return pd.DataFrame(rows + floor_rows(), dtype=object)


def floor_rows() -> list[dict]:
    """The val_unseen floors on the embedded houses, every part: a constant sentence, another
    path's true words (another sample's label), and the true words (the top)."""
    t = floor_table()
    names = {"constant": "floor: a constant sentence", "other path": "floor: another path's words",
             "true": "top: the true words"}  # fmt: skip
    return [
        {"round": label, "seeds": int(t.loc[f, "seeds"])}
        | {f"val_unseen_{k}": t.loc[f, k] for k in PARTS}
        for f, label in names.items()
    ]


def plot(curve: pd.DataFrame, png: Path, command: str) -> None:
    fig, ax = figures.subplots(figsize=(7, 4))
    names = {"chain": "chained round", "fedavg": "FedAvg round (the default)"}
    arms = list(dict.fromkeys(curve["label"]))
    for (label, seed), g in curve.groupby(["label", "seed"], sort=False):
        ax.plot(g["round"], g["val_unseen_fidelity"], color="C1" if label == "chain" else "C0",
                alpha=0.4 + 0.2 * seed, label=f"{names.get(label, label)}, seed {seed}")  # fmt: skip
    ax.plot(curve.groupby("round")["floor-val_unseen_fidelity"].mean(), color="grey", lw=1,
            label="untrained speaker (floor)")  # fmt: skip
    draw_floors(ax)
    ax.set(xlabel="round (6 of 12 seen houses a round)",
           ylabel="val_unseen route fidelity (strict)",
           title=f"federated speaker stage: {', '.join(names.get(a, a) for a in arms)} (Flower "
                 "simulation engine)")  # fmt: skip
    ax.legend(fontsize=7)
    fig.tight_layout()
    figures.save(fig, png, command)


def outputs(study: dict) -> list[Path]:
    return study_files(RESULTS, study["name"])


def report(runs: pd.DataFrame, study: dict, command: str) -> str:
    curve = curves(runs)
    table = summarize(curve)
    save_study(outputs(study), curve, table, command, plot)
    return pipe_table(list(table.columns), table.fillna("").values.tolist())


def replot(study: dict) -> int:
    return redraw_study(outputs(study), plot)
