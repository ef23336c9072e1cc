"""What a speaker that says nothing about the route scores: the floor rows of every speaker table
(issue 41), on the embedded houses and on real R2R, with no training at all.

    python -m experiments.study experiments/studies/fedvln_speaker_floors.toml

(the analysis of that study file, which names the data sources and seeds).

Per data source and split, one instruction per val path:

- `constant`: the train instruction with the highest corpus BLEU when written for every train
  path (`training.vln_speaker_quality.best_constant`; its 400 candidates are a seeded sample
  of the train instructions, so seeds differ), written for every val path;
- `other path`: the next path's first true instruction in the same house;
- `true`: the path's own first reference (route fidelity only; a reference's BLEU against the
  others is not a speaker's).

Scores: BLEU-4 against each path's references (sacrebleu, R2R tokenization) and route
fidelity (`envs.vln_fidelity`; on R2R it reads the real houses' region labels and objects, and
human instructions name rooms in more words than the grammar's, so its `true` row is the
ceiling to read the others against). Results: experiments/results/fedvln_speaker_floors.csv
(mean ± sd over seeds, generated into README.md and docs/fedvln.md), one row per seed, split
and floor in fedvln_speaker_floors_runs.csv, and the figure.

The R2R floors also become rows of every committed R2R Table 4
(experiments/results/fedvln_table4_r2r*.csv, the pipeline's speaker tables), under the names
and columns the pipeline gives the embedded houses' floors, so each trained speaker is read
against them in its own table (issue 41). The pipeline writes these rows itself for the
embedded houses; for R2R its runs are not on every machine, and the floors need none.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from envs.vln_setup import open_vln
from experiments import figures
from experiments.fedvln.runs import summary
from experiments.simulate import RESULTS, ROOT
from experiments.tables import mean_sd, pipe_table, redraw_study, save_study, study_files
from training import vln_speaker_quality as quality

METRICS = [
    "bleu",
    "rooms_on_route",
    "room_f1",
    "goal_room",
    "stop_object",
    "first_turn",
    "fidelity",
]


def one_run(data: str, seed: int) -> list[dict]:
    """One seed's floors on one data source: `data` '' is the embedded houses, else the R2R
    folder (relative to the project). The seed draws the constant's candidate sample."""
    source = "R2R" if data else "embedded houses"
    vln = open_vln(str(ROOT / data) if data else "")
    constant = quality.best_constant(vln.split("train"), seed)
    rows = []
    for split in ("val_seen", "val_unseen"):
        paths, refs = quality.one_per_path(vln.split(split))
        for name, hyps in (
            ("true", [p.instruction for p in paths]),
            ("constant", [constant] * len(paths)),
            ("other path", quality.other_path(paths)),
        ):
            bleu = quality.corpus_bleu(hyps, paths, refs).score if name != "true" else None
            rows.append(
                {
                    "data": source,
                    "floor": name,
                    "split": split,
                    "seed": seed,
                    "paths": len(paths),
                    "bleu": bleu,
                    **quality.fidelity(vln.data, paths, hyps, refs),
                    "constant": constant if name == "constant" else "",
                }
            )
    print(f"  {source} seed {seed}: constant = {constant!r}", flush=True)
    return rows


# a floor's name in the pipeline's Table 4 (experiments/fedvln/pipeline.table4)
TABLE4_NAMES = {
    "constant": "constant sentence (floor)",
    "other path": "other path's instruction (floor)",
}


def table4_rows(runs: pd.DataFrame, data: str) -> pd.DataFrame:
    """`data`'s floors as Table 4 rows: the pipeline's speaker names and columns (BLEU and route
    fidelity per val split, val_unseen's rooms on route, goal room and stop object), mean and
    sd over seeds; a floor trains nothing, so its best and last checkpoints are the same row."""
    from experiments.fedvln.pipeline import T4_METRICS, T4_PARTS

    mine = runs[(runs["data"] == data) & runs["floor"].isin(TABLE4_NAMES)]
    per_seed = []
    for (floor, seed), g in mine.groupby(["floor", "seed"], sort=False):
        row = {"speaker": TABLE4_NAMES[floor], "seed": seed, "steps": 0}
        for r in g.itertuples():
            row |= {f"{r.split}_bleu": r.bleu, f"{r.split}_fidelity": r.fidelity}
            row |= {f"{r.split}_{k}": getattr(r, k) for k in METRICS if k != "bleu"}
        per_seed += [row | {"checkpoint": ck} for ck in ("best", "last")]
    cols = [*T4_METRICS, *T4_PARTS, "steps"]
    return summary(per_seed, ["speaker", "checkpoint"], cols).assign(source="ours")


def into_table4(csv, floors: pd.DataFrame) -> pd.DataFrame:
    """`csv`'s Table 4 with `floors` in place of any floor rows it had, right after the
    untrained floor (and one empty paper row each, as the pipeline writes)."""
    t = pd.read_csv(csv)
    t = t[~t["speaker"].isin(floors["speaker"])]
    ours, paper = t[t["source"] == "ours"], t[t["source"] != "ours"]
    untrained = ours["speaker"].str.startswith("untrained")
    papers = floors.drop_duplicates("speaker")[["speaker"]].assign(source="paper")
    out = pd.concat([ours[untrained], floors, ours[~untrained], paper, papers], ignore_index=True)
    return out[[c for c in out.columns if c != "source"] + ["source"]]


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (data, floor, split), g in runs.groupby(["data", "floor", "split"], sort=False):
        out.append(
            {
                "data": data,
                "floor": floor,
                "split": split,
                "seeds": g.seed.nunique(),
                **{m: mean_sd(g[m]) if g[m].notna().any() else "" for m in METRICS},
            }
        )
    return pd.DataFrame(out)


def markdown(table: pd.DataFrame) -> str:
    head = ["data", "floor", "split", "seeds", "BLEU-4", "rooms on route", "room F1", "goal room"]
    head += ["stop object", "first turn", "route fidelity"]
    t = table.fillna("")
    return pipe_table(head, t[["data", "floor", "split", "seeds", *METRICS]].values.tolist())


def outputs(study: dict) -> list[Path]:
    return study_files(RESULTS, study["name"])


def report(runs: pd.DataFrame, study: dict, command: str) -> str:
    """The study's three files; R2R's floors also become rows of every committed R2R Table 4."""
    table = summarize(runs)
    save_study(outputs(study), runs, table, command, plot)
    if (runs["data"] == "R2R").any():
        floors4 = table4_rows(runs, "R2R")
        for csv in sorted(RESULTS.glob("fedvln_table4_r2r*.csv")):
            into_table4(csv, floors4).round(4).to_csv(csv, index=False)  # no double rounding
            print(f"  floor rows written into {csv.name}")
    return markdown(table)


def replot(study: dict) -> int:
    return redraw_study(outputs(study), plot)


def plot(runs: pd.DataFrame, png: Path, command: str) -> None:
    """BLEU-4 and route fidelity of each floor per data source and val split, mean ± sd over
    seeds: the levels every trained speaker is read against (the true words' fidelity is the
    parser's ceiling, BLEU has none for them)."""
    import numpy as np

    sources = list(dict.fromkeys(runs["data"]))
    fig, axes = figures.subplots(1, 2 * len(sources), figsize=(4 * 2 * len(sources), 3.6))
    for i, (src, metric) in enumerate((s, m) for s in sources for m in ("bleu", "fidelity")):
        ax = axes[i]
        names = ["constant", "other path"] + (["true"] if metric == "fidelity" else [])
        for j, split in enumerate(("val_seen", "val_unseen")):
            g = runs[(runs["data"] == src) & (runs["split"] == split)]
            stats = [g[g["floor"] == n][metric].astype(float) for n in names]
            x = np.arange(len(names)) + (j - 0.5) * 0.38
            ax.bar(x, [v.mean() for v in stats], 0.38, yerr=[v.std() for v in stats],
                   capsize=3, label=split)  # fmt: skip
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set(title=f"{src}: {'BLEU-4' if metric == 'bleu' else 'route fidelity'}",
               ylim=(0, 100))  # fmt: skip
        ax.legend(fontsize=7)
    fig.suptitle("What a speaker that reads no route scores (no training)", fontsize=10)
    fig.tight_layout()
    figures.save(fig, png, command)
