"""Reading a FedVLN study's runs back: one run's evaluation curve, its best and last
checkpoints, mean and sd over seeds, and whether a finished run is the very launch a study
asks for (so it is read, not trained again). Shared by the pipeline and the studies that read
its runs (gap, finetune_lr, gains, teaching)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from config import parse
from config.fedvln_recipe import recipe_record, recorded_recipe
from config.schema import merged, parse_overrides

# the held-out-house control of pre-exploration (issue 64 item 4): env-based, each unseen house
# adapting on the next unseen house's routes (fedvln.routes-house = "next-unseen"), scored in its own
HOUSE_CONTROL = "env-based@other"
# the budget control of federated Table 5 (issue 64 item 6): env-based with each unseen house
# training at the federated variants' r1 (fedvln.env-based-rate), so each makes their updates
BUDGET_CONTROL = "env-based@r1"


def curve(out: Path, run: str) -> pd.DataFrame | None:
    """Evaluations of one run of one seed, with `steps` (cumulative optimizer steps, all
    houses) and the metric columns; None if the run is missing or unfinished."""
    if run.startswith("central/"):
        stage = run.split("/")[1]
        f = out / "central" / f"{stage}_log.csv"
        if not f.is_file():
            return None
        df = pd.read_csv(f).rename(columns={"iteration": "steps"})
        for split in ("val_seen", "val_unseen"):
            if f"{split}_n" not in df:
                df[f"{split}_n"] = np.nan
        return df
    if run in ("untrained", "constant", "other-path", "start"):
        f = out / run / "log.csv"
        return pd.read_csv(f) if f.is_file() else None
    if run == "preexplore-centralized":
        f = out / run / "log.csv"
        return pd.read_csv(f).rename(columns={"local_steps_cum": "steps"}) if f.is_file() else None
    f, cfg = out / run / "rounds.csv", out / run / "config.json"
    if not f.is_file() or not cfg.is_file() or "wall_s" not in json.loads(cfg.read_text()):
        return None  # missing, or still running
    df = pd.read_csv(f)
    df = df[df["round"] > 0].copy()
    df["steps"] = df["local_steps"].fillna(0).cumsum()
    key = "val_unseen_sr" if "val_unseen_sr" in df else "val_unseen_bleu"
    return df[df[key].notna()].reset_index(drop=True)


def at_cap(out: Path, run: str) -> float:
    """1.0 if a finished federated run trained to its round cap (`num-server-rounds`) without
    patience stopping it (so the cap may bind), 0.0 if patience stopped it (even in the cap's
    round) or something else ended it (a privacy budget), NaN where that is not recorded (no
    rounds.csv: the centralized runs; a run without `convergence` in its config.json)."""
    f, cfg_file = out / run / "rounds.csv", out / run / "config.json"
    if not f.is_file() or not cfg_file.is_file():
        return float("nan")
    cfg = json.loads(cfg_file.read_text())
    conv, cap = cfg.get("convergence"), int(cfg.get("num-server-rounds", 0))
    if not isinstance(conv, dict) or cap <= 0:
        return float("nan")
    if conv.get("stopped_early") or "stopped" in cfg:
        return 0.0
    return float(int(pd.read_csv(f)["round"].max()) >= cap)


# what the launcher fills in or a resume sets, none of which changes the training
LAUNCHER_KEYS = ("out-dir", "plots", "resume", "resume-round", "num-clients")
# the recipe's overrides: compared as the recipe they resolve to (config.json's "recipe")
RECIPE_KEYS = (
    "fedvln.optimizer",
    "fedvln.lr",
    "fedvln.server-lr",
    "fedvln.server-lr-decay",
    "fedvln.seen-rate",
)


def finished_twin(candidates: list[Path], run_config: str, rounds: int, seed: int) -> Path | None:
    """The first finished federated run among `candidates` that is this very launch: its
    config.json holds `run_config` over the defaults, the same rounds cap and seed, and the
    recipe those settings resolve to today (so a run of an older recipe is no twin, and
    `fedvln.lr=1e-3` is the twin of a run that left the recipe its 1e-3). Lets a study read
    another study's run instead of training it twice."""
    want = {**merged(parse_overrides(run_config)), "num-server-rounds": rounds, "seed": seed}
    want["method"] = "fedvln"
    recipe = recipe_record(parse(want).fedvln)
    for run in candidates:
        if curve(run.parent, run.name) is None:
            continue
        done = json.loads((run / "config.json").read_text())
        skip = LAUNCHER_KEYS + RECIPE_KEYS
        if recorded_recipe(done) == recipe and all(
            done.get(k) == v for k, v in want.items() if k not in skip
        ):
            return run
    return None


def pick(df: pd.DataFrame, key: str) -> dict[str, pd.Series]:
    """{'best': the evaluation with the highest `key`, 'last': the final one}."""
    return {"best": df.loc[df[key].idxmax()], "last": df.iloc[-1]}


def summary(rows: list[dict], keys: list[str], metrics: list[str]) -> pd.DataFrame:
    """Mean, sd and n over seeds of `metrics`, grouped by `keys`."""
    df = pd.DataFrame(rows)
    out = []
    for group, g in df.groupby(keys, sort=False):
        row = dict(zip(keys, group if isinstance(group, tuple) else (group,)))
        row["n_seeds"] = len(g)
        for m in metrics:
            if m in g:
                row[m] = g[m].mean()
                row[f"{m}_sd"] = g[m].std(ddof=1) if len(g) > 1 else float("nan")
        out.append(row)
    return pd.DataFrame(out)


def seed_dirs(out: Path, seeds: list[int]) -> dict[int, Path]:
    return {s: out / f"seed{s}" for s in seeds if (out / f"seed{s}").is_dir()}
