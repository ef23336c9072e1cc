"""What a speaker that says nothing about the route scores: the floor rows of every speaker table
(issue 41), on the embedded houses and on real R2R, with no training at all.

    python -m experiments.fedvln.speaker_floors [--seeds 0 1 2] [--r2r ../shared/data] [--force]

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
(mean ± sd over seeds), generated into README.md and docs/fedvln.md.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from envs.vln_setup import open_vln
from experiments.simulate import RESULTS, ROOT, command_line
from experiments.tables import mean_sd, pipe_table, refuse_overwrite
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


def floors(source: str, data_dir: str, seeds: list[int]) -> list[dict]:
    vln = open_vln(data_dir)
    rows = []
    for seed in seeds:
        constant = quality.best_constant(vln.split("train"), seed)
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
                        **quality.fidelity(vln.data, paths, hyps),
                        "constant": constant if name == "constant" else "",
                    }
                )
        print(f"  {source} seed {seed}: constant = {constant!r}", flush=True)
    return rows


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--r2r", default=str(ROOT.parent / "shared" / "data"), help="'' = skip R2R")
    ap.add_argument("--force", action="store_true", help="overwrite existing result files")
    a = ap.parse_args(argv)
    dest = RESULTS / "fedvln_speaker_floors.csv"
    try:
        refuse_overwrite([dest], a.force)
    except ValueError as e:
        print(f"fedvln_speaker_floors: {e}", file=sys.stderr)
        return 2
    rows = floors("embedded houses", "", a.seeds)
    if a.r2r:
        rows += floors("R2R", a.r2r, a.seeds)
    table = summarize(pd.DataFrame(rows))
    table.to_csv(dest, index=False)
    print(f"\n{command_line(__file__, argv)}\n\n{markdown(table)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
