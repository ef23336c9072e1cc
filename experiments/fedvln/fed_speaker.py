"""Why the federated speaker did not ground (issue 41): its route fidelity against the
sequential optimizer steps it made, for the federated schedules tried, beside the centralized
grounded speaker of the pipeline.

    python -m experiments.fedvln.fed_speaker            # run what is missing, then summarize
    python -m experiments.fedvln.fed_speaker --seeds 0 1 --schedules r0.5-p16
    python -m experiments.fedvln.fed_speaker --summarize-only   # every seed and schedule run

Each schedule is one `simulation.py fedvln --stage speaker` run per seed, to a fixed round cap
(or, "-p16", the pipeline's patience of 16 evaluations), in
runs/fedvln-speaker-fed/<name>-s<seed> (resumable); the pipeline's own speaker run
(runs/fedvln/seed<k>/speaker: 6 houses, the official server step eta = 1.6, patience 16) is
summarized beside them as "r0.5-eta1.6-p16 (pipeline)". A round's sequential
steps are the local steps of one house (summed local steps / houses that trained), so a
federated and a centralized curve are compared at the same number of updates one after the
other. Written: experiments/results/fedvln_fed_speaker.csv (best and last val_seen fidelity
per seed and schedule, with the val_unseen fidelity and its target parts, rooms on route, goal
room and stop object, at the same evaluation; every run found in --out is summarized, so
running one seed keeps the others' rows) and its figure, a panel per seed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from experiments import figures
from experiments.simulate import RESULTS, ROOT, command_line, simulate
from experiments.tables import pipe_table

# name: (run config beyond the speaker stage, round cap, eval every, patience in evaluations);
# each names its share and server step: the cpu speaker recipe's own are now the grounding
# schedule's (r = 0.5, eta = 1.6; config/fedvln_recipe.py), which these runs compare against
R02, R05 = "fedvln.seen-rate=0.2 fedvln.server-lr=1.0", "fedvln.seen-rate=0.5 fedvln.server-lr=1.0"
SCHEDULES = {
    "r0.2": (R02, 240, 6, 0),  # the paper's share of houses: 2 of 12 a round, tau = 5
    "r0.2-tau1": (f"{R02} fedvln.speaker-epochs=1", 375, 15, 0),
    "r0.2-lr2e-4": (f"{R02} fedvln.lr=0.0002", 290, 10, 0),
    "r0.5": (R05, 130, 5, 0),  # 6 of 12 houses a round
    # the pipeline's speaker before issue 41's server step: 6 houses, eta = 1, patience 16
    "r0.5-p16": (R05, 300, 3, 16),
}
CENTRAL = ROOT / "runs" / "fedvln" / "seed{seed}" / "central" / "speaker_log.csv"
# the pipeline's own federated speaker (r = 0.5, eta = 1.6, patience 16 evaluations, cap 300)
PIPELINE = ROOT / "runs" / "fedvln" / "seed{seed}" / "speaker"
PIPED = "r0.5-eta1.6-p16 (pipeline)"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "runs" / "fedvln-speaker-fed"))
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--schedules", nargs="+", default=list(SCHEDULES), choices=list(SCHEDULES))
    p.add_argument("--summarize-only", action="store_true")
    p.add_argument("--results-dir", default=str(RESULTS))
    return p.parse_args(argv)


def run(out: Path, name: str, seed: int) -> Path:
    """One schedule's run (experiments.simulate: reused when finished, resumed when not)."""
    extra, rounds, every, patience = SCHEDULES[name]
    rc = f'fedvln.stage="speaker" eval-every={every} fedvln.patience={patience} {extra}'.strip()
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


def row(name: str, df: pd.DataFrame, houses: str, seed: int = 0) -> list[dict]:
    best = df.loc[df["val_seen_fidelity"].idxmax()]
    last = df.iloc[-1]
    return [
        {
            "seed": seed,
            "schedule": name,
            "houses_per_round": houses,
            "checkpoint": ck,
            "seq_steps": int(r["seq_steps"]),
            "val_seen_fidelity": round(float(r["val_seen_fidelity"]), 1),
            "val_unseen_fidelity": round(float(r["val_unseen_fidelity"]), 1),
            "val_unseen_rooms_on_route": _part(r, "val_unseen_rooms_on_route"),
            "val_unseen_goal_room": round(float(r["val_unseen_goal_room"]), 1),
            "val_unseen_stop_object": _part(r, "val_unseen_stop_object"),
            "val_unseen_bleu": round(float(r["val_unseen_bleu"]), 1),
            "seq_steps_cap": int(df["seq_steps"].iloc[-1]),
        }
        for ck, r in (("best", best), ("last", last))
    ]


def _part(r: pd.Series, key: str) -> float | None:
    """A fidelity part of the evaluation (None where an older log lacks it)."""
    return round(float(r[key]), 1) if key in r and pd.notna(r[key]) else None


def main(argv=None) -> int:
    a = parse_args(argv)
    out = Path(a.out)
    if not a.summarize_only:
        for seed in a.seeds:
            for name in a.schedules:
                run(out, name, seed)
    rows, curves = [], {}  # curves: seed -> schedule -> evaluated rounds
    scheduled = {int(d.name.rsplit("-s", 1)[1]) for d in _runs(out)}
    for seed in sorted({0, *a.seeds, *scheduled, *_pipeline_seeds()}):
        for name in SCHEDULES:
            run_dir = out / f"{name}-s{seed}"
            if not (run_dir / "rounds.csv").is_file():
                continue
            df = pd.read_csv(run_dir / "rounds.csv")
            curves.setdefault(seed, {})[name] = curve(run_dir)
            rows += row(name, curves[seed][name], f"{np.mean(df['n_clients']):g}", seed)
        piped = Path(str(PIPELINE).format(seed=seed))
        if _finished(piped):
            curves.setdefault(seed, {})[PIPED] = curve(piped)
            rows += row(PIPED, curves[seed][PIPED], "6", seed)
        central = central_curve(seed)
        if central is not None and seed in curves:
            curves[seed]["centralized"] = central
            rows += row("centralized", central, "pooled", seed)
    if not rows:
        print(f"{out}: no run yet (run without --summarize-only)")
        return 1
    table = pd.DataFrame(rows)
    dest = Path(a.results_dir) / "fedvln_fed_speaker"
    dest.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(dest.with_suffix(".csv"), index=False)
    print(table.to_string(index=False))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4), squeeze=False)
    for ax, (seed, by_name) in zip(axes[0], sorted(curves.items())):
        for name, df in by_name.items():
            ax.plot(df["seq_steps"], df["val_unseen_fidelity"], label=name)
        for floor, style in (("constant", ":"), ("other path", "-.")):
            ax.axhline(floor_fidelity(floor), color="grey", ls=style, label=f"{floor} (floor)")
        ax.set(
            xlabel="sequential optimizer steps",
            ylabel="val_unseen route fidelity",
            title=f"federated speaker schedules vs centralized, seed {seed}",
        )
        ax.legend(fontsize=8)
    fig.tight_layout()
    figures.save(fig, dest.with_suffix(".png"), command_line(__file__, argv))
    return 0


def _cell(v) -> str:
    return "" if v is None or pd.isna(v) else f"{v}"


def _finished(run_dir: Path) -> bool:
    """The pipeline's run counts once it finished (its cap, or stopped by patience)."""
    done = run_dir / "study.json"
    return done.is_file() and bool(json.loads(done.read_text()).get("finished"))


def markdown(table: pd.DataFrame) -> str:
    """The best-checkpoint rows, per seed: where each schedule's val_seen fidelity peaked, in
    sequential steps, out of how many it ran."""
    best = table[table["checkpoint"] == "best"]
    head = ["seed", "schedule", "houses a round", "sequential steps at best / run"]
    head += ["best val_seen fidelity", "val_unseen fidelity", "rooms on route", "goal room"]
    head += ["stop object", "val_unseen BLEU"]
    rows = [
        [
            r["seed"],
            r["schedule"],
            r["houses_per_round"],
            f"{r['seq_steps']:,} / {r['seq_steps_cap']:,}",
            r["val_seen_fidelity"],
            r["val_unseen_fidelity"],
            _cell(r.get("val_unseen_rooms_on_route")),
            r["val_unseen_goal_room"],
            _cell(r.get("val_unseen_stop_object")),
            r["val_unseen_bleu"],
        ]
        for _, r in best.iterrows()
    ]
    return pipe_table(head, rows)


def _pipeline_seeds() -> set[int]:
    """Seeds whose pipeline speaker finished (they join the table without a schedule run)."""
    root = Path(str(PIPELINE).format(seed=0)).parent.parent
    seeds = (d.name.removeprefix("seed") for d in root.glob("seed*"))
    return {int(k) for k in seeds if k.isdigit() and _finished(root / f"seed{k}" / "speaker")}


def _runs(out: Path) -> list[Path]:
    """Run folders of known schedules under `out` (`<schedule>-s<seed>`)."""
    if not out.is_dir():
        return []
    return [d for d in out.iterdir() if d.name.rsplit("-s", 1)[0] in SCHEDULES]


if __name__ == "__main__":
    raise SystemExit(main())
