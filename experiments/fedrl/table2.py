"""The FedRL paper's Table 2 (Text2Action: WHS, CT, WHG), the paper's numbers beside ours, and
the run layer of the study kind "fedrl-text2action" (experiments/study.py):

    python -m experiments.study experiments/studies/fedrl_table2.toml

Methods (experiments/fedrl/local.py; Text2Action has one joint action per word, select or
neglect): FCN-alpha / FCN-full (TextCNN trained by cross-entropy on the action with the larger
basic reward, following it), DQN-alpha (alpha's POS features only), FedRL (alpha: POS, beta: word
vectors; test_noise on / off) with theta_g as the paper sizes it (4 hidden units; the method
`fedrl-mlp32` has 32, the one change; not in the committed study: the paper's 4 learns on
every fold once the targets are slow, experiments/fedrl/t2a_collapse.py), DQN-full (both features in one network), and a floor that
learns nothing: each word selected with probability 1/2. All methods get the same texts, rewards,
rounds (B texts x S words, then K updates per round), exploration, replay and model selection.

Splits: the official 5-fold indices; the run with fold f scores fold f (test), and selects its
checkpoint on every 8th remaining text (valid); the rest trains. A row's runs are the folds x
seeds (run seed = 10 x seed + fold), so the default's five runs are the five folds of the
cross-validation, each with its own seed. Each run is scored at the best-valid checkpoint
(`best`) and the last round (`last`). (The reference picks its best epoch on the held-out fold
itself; we never score the texts that selected the checkpoint.)

CPU defaults, and what full scale changes: texts cut to their first `words` = 100 words (the
reference keeps 500: win2k's texts average 45 words, cooking's 209, wikihow's 417, so cooking and
wikihow are scored on their openings only); 150 rounds of 4 texts x 8 words with 32 updates each
(4,800 words and updates, about one pass over win2k's training words; the reference trains up to
20 passes with early stopping). Full scale: `words = 500`, `rounds = 3000` in the study file.

Word vectors: the reference's pretrained 50-d model is not published; beta uses word2vec trained
on the three corpora (envs/word_vectors.py), named as such in the CSV.

Dataset columns: the paper's Table 2 does not label them; we read them as WHS, CT, WHG (win2k,
cooking, wikihow), the order of EASDRL's tables and of the F1s falling with the share of action
words (19%, 10%, 8%).

Each run is saved as it finishes (runs/fedrl_table2/, or the runner's `--work`); a rerun skips
those there. Results: experiments/results/<name>{,_runs,_paired}.csv and <name>.png.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from config.papers import FEDRL_TABLE2, FEDRL_TABLE2_DATASETS
from experiments.fedrl import table_runs
from experiments.simulate import RESULTS, ROOT
from experiments.tables import mean_sd, pipe_table, redraw

DATASETS = FEDRL_TABLE2_DATASETS
NAMES = {"win2k": "WHS", "cooking": "CT", "wikihow": "WHG"}
# Table 2 of the paper (F1 %, AvgRwd) at WHS / CT / WHG; FedRL-1/-2 as printed
PAPER = FEDRL_TABLE2  # config/papers.py: the one copy
# label, method, test_noise, paper key(s)
ROWS = [
    ("random (select p=1/2)", "random-alpha", "", ()),
    ("FCN-alpha", "fcn-alpha", "", ("fcn-alpha",)),
    ("DQN-alpha", "dqn-alpha", "", ("dqn-alpha",)),
    ("FedRL test_noise=on", "fedrl", "on", ("fedrl-1", "fedrl-2")),
    ("FedRL test_noise=off", "fedrl", "off", ("fedrl-1", "fedrl-2")),
    ("FedRL, MLP 32, test_noise=on", "fedrl-mlp32", "on", ("fedrl-1", "fedrl-2")),
    ("FedRL, MLP 32, test_noise=off", "fedrl-mlp32", "off", ("fedrl-1", "fedrl-2")),
    ("FCN-full", "fcn-full", "", ("fcn-full",)),
    ("DQN-full", "dqn-full", "", ("dqn-full",)),
]
METHODS = list(dict.fromkeys(r[1] for r in ROWS))
# variants: (method of experiments/fedrl/local.py, run config): 32 hidden units (Grid-World's
# "32 x 4") instead of the paper's 4 isolates that one choice
VARIANTS = {"fedrl-mlp32": ("fedrl", {"fedrl.mlp-hidden": 32})}
# the reference's schedule (FRL2019/FRL text2action/main.py): one update per word tagged,
# exploration 1 -> 0.1 over 1,000 steps, updates from 32 transitions on. Target networks: copied
# every 1,000 updates, for every method. The reference's `target_steps` 5 copies its DQN
# baselines' targets every 5 steps, while its FRL mode copies its targets onto themselves (they
# never leave their random initialisation); with real copies every 5, FedRL's Q_hat diverged to
# thousands and it collapsed on 5 of 5 CT folds, with 1,000 it learned on 5 of 5
# (experiments/fedrl/t2a_collapse.py). 1,000 is also Text2Action's default (fedrl.target-update 0).
CPU_CONFIG = {
    "fedrl.envs": 4,
    "fedrl.act-steps": 8,
    "fedrl.updates": 32,
    "fedrl.batch-size": 32,
    "fedrl.target-update": 1000,
    "fedrl.eps-decay": 1000,
    "fedrl.warmup": 64,
    "fedrl.replay": 50000,
}


def paper_value(keys: tuple, metric: str, dataset: str) -> str:
    vals = [PAPER[(k, metric)][DATASETS.index(dataset)] for k in keys if (k, metric) in PAPER]
    return " / ".join(f"{v:g}" for v in vals)


def job_key(job: dict) -> str:
    extra = "_".join(f"{k.split('.')[-1]}={v}" for k, v in sorted(job["extra"].items()))
    return (
        f"{job['method']}_{job['dataset']}_f{job['fold']}_s{job['seed']}_w{job['words']}"
        f"_r{job['rounds']}" + (f"_{extra}" if extra else "")
    ).replace("/", "-")


def settings_of(job: dict):
    return table_runs.settings_of(
        job,
        {
            "fedrl.domain": "text2action",
            "fedrl.t2a-data": job["data"],
            "fedrl.t2a-dataset": job["dataset"],
            "fedrl.t2a-fold": job["fold"],
            "fedrl.t2a-words": job["words"],
            **CPU_CONFIG,
            **VARIANTS.get(job["method"], ("", {}))[1],
        },
    )


def trained(job: dict) -> str:
    """The method of experiments/fedrl/local.py a job trains (a variant's base method)."""
    return VARIANTS.get(job["method"], (job["method"],))[0]


def fingerprint(job: dict) -> str:
    """experiments/fedrl/table_runs.fingerprint, the corpus folder's bytes its data."""
    return table_runs.fingerprint(job, settings_of(job), "t2a_data", trained(job))


def one_run(job: dict) -> list[dict]:
    """Train and score one (method, dataset, fold, seed); rows per checkpoint and noise."""
    s = settings_of(job)

    def scores(last, pre, sfx):
        keys = ("f1", "precision", "recall", "avg-reward")
        return {k.replace("-", "_"): last[f"{pre}test-{k}{sfx}"] for k in keys}

    def fields(last):
        ident = {k: job[k] for k in ("method", "dataset", "fold", "seed")}
        return ident, {
            "best_round": last["best-round"],
            "rounds": job["rounds"],
            "words": s.t2a_words,
            "updates": job["rounds"] * s.updates,
            "transitions": job["rounds"] * s.envs * s.act_steps,
            "clip": s.clip_bound,
            "sigma": s.sigma,
            "mlp_hidden": s.mlp_width,
            "word_vectors": "word2vec on the 3 corpora (substitute)",
            "texts": json.dumps({k: v["texts"] for k, v in s.map_report().items()}),
        }

    return table_runs.train_rows(job, trained(job), s, fingerprint(job), scores, fields)


def cached_run(job: dict) -> list[dict]:
    """A finished run from the work folder, if it was trained under this job's fingerprint."""

    def describe(out: list[dict]) -> str:
        best = [r for r in out if r["checkpoint"] == "best"]
        return (
            f"  {job['method']:12s} {job['dataset']:8s} fold {job['fold']} seed {job['seed']}: "
            + ", ".join(f"F1 {r['test_noise'] or ''} {r['f1']:.3f}" for r in best)
            + f" (best at round {out[0]['best_round']}, {out[0]['wall_s']:.0f} s)"
        )

    return table_runs.cached_rows(
        job, job_key(job), fingerprint(job), lambda: one_run(job), describe
    )


def shown(runs: pd.DataFrame) -> list[tuple]:
    """The table's rows whose method was run."""
    return [r for r in ROWS if r[1] in set(runs.method)]


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for metric, col, scale, key in (
        ("F1 %", "f1", 100.0, "f1"),
        ("AvgRwd", "avg_reward", 1.0, "rwd"),
    ):
        for label, method, noise, paper in shown(runs):
            row = {"metric": metric, "method": label}
            for ds in [d for d in DATASETS if d in set(runs.dataset)]:
                sel = runs[
                    (runs.method == method)
                    & (runs.dataset == ds)
                    & (runs.test_noise.fillna("") == noise)
                ]
                for ckpt in ("best", "last"):
                    row[f"{NAMES[ds]} ours {ckpt}"] = mean_sd(
                        sel[sel.checkpoint == ckpt][col].to_numpy() * scale
                    )
                row[f"{NAMES[ds]} runs"] = len(sel) // 2
                row[f"{NAMES[ds]} paper"] = paper_value(paper, key, ds)
            rows.append(row)
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    names = [c.split(" ")[0] for c in table.columns if c.endswith(" paper")]
    head = ["metric", "method"] + [f"{n} {c}" for n in names for c in ("best", "last", "paper")]
    rows = [
        [r.metric, r.method]
        + [r[f"{n} {c}"] for n in names for c in ("ours best", "ours last", "paper")]
        for _, r in table.iterrows()
    ]
    return pipe_table(head, rows)


def plot(runs: pd.DataFrame, path: Path, command: str) -> None:
    """F1 per data set, the paper's Table 2 beside."""
    rows = shown(runs)
    panels = [
        (f"{NAMES[ds]} ({ds})", "F1 of action names on the test fold (%)",
         runs[runs.dataset == ds], [[PAPER[(k, "f1")][DATASETS.index(ds)] for k in p] for *_, p in rows])
        for ds in DATASETS if ds in set(runs.dataset)
    ]  # fmt: skip
    label = "paper Table 2 (FedRL: FedRL-1..FedRL-2)"
    table_runs.bars(panels, rows, "f1", label, path, command)


def paired(runs: pd.DataFrame) -> pd.DataFrame:
    """FedRL (test_noise on) minus each baseline, paired by fold (the same texts, the same run
    seed), best checkpoint: mean difference in F1 points and its 95% t-interval; "within noise"
    when the interval holds 0. The comparisons the paper's text makes (FedRL beats DQN-alpha,
    and is slightly better than DQN-full)."""
    from experiments.tables import paired_interval

    best = runs[runs.checkpoint == "best"]
    rows = []
    for ds in DATASETS:
        one = best[best.dataset == ds]
        fed = one[(one.method == "fedrl") & (one.test_noise == "on")].set_index("fold").f1
        for other in ("dqn-alpha", "dqn-full"):
            pair = pd.concat([fed, one[one.method == other].set_index("fold").f1], axis=1)
            pair = 100 * pair.dropna()
            if len(pair) < 2:
                continue
            mean, low, high = paired_interval(pair.iloc[:, 0], pair.iloc[:, 1])
            rows.append(
                {
                    "dataset": ds,
                    "comparison": f"fedrl test_noise=on - {other}",
                    "folds": len(pair),
                    "mean_f1_points": round(mean, 2),
                    "ci95_low": round(low, 2),
                    "ci95_high": round(high, 2),
                    "within_noise": bool(low <= 0 <= high),
                }
            )
    return pd.DataFrame(rows)


# --- the study kind "fedrl-text2action" (experiments/study.py): one cached run per cell ---

CROSSED = {"datasets": "dataset", "folds": "fold", "seeds": "seed", "methods": "method"}

CELL = {"method", "dataset", "fold", "seed", "rounds", "words", "eval-every", "data", "run-config"}
WORK = ROOT / "runs" / "fedrl_table2"


def crossed(study: dict) -> dict[str, str]:
    """The grid's list fields crossed into cells (experiments/study.cells)."""
    return CROSSED


def check(cell: dict, where) -> None:
    """One study cell's fields (ValueError naming the study file and the field)."""
    from experiments.study import check_cell

    check_cell(cell, where, CELL, METHODS)
    if cell["dataset"] not in DATASETS:
        raise ValueError(f"{where}: grid.datasets: {cell['dataset']!r} is not one of {DATASETS}")
    for key in ("rounds", "words", "eval-every", "data"):
        if key not in cell:
            raise ValueError(f"{where}: grid.{key}: missing")
    for key in ("rounds", "words", "eval-every"):
        if not isinstance(cell[key], int) or isinstance(cell[key], bool) or cell[key] <= 0:
            raise ValueError(f"{where}: grid.{key}: a positive number")
    if not data_dir(cell).is_dir():
        raise ValueError(f"{where}: grid.data: {data_dir(cell)}: no such directory")


def data_dir(cell: dict) -> Path:
    """The EASDRL pickles' folder, relative to the project."""
    return (ROOT / cell["data"]).resolve()


def jobs(cells: list[dict], work: Path | None) -> list[dict]:
    """The run layer's job dicts (`cached_run`); a run's seed is 10 x seed + fold, so a row's
    folds each have their own. A bad fold or a broken file fails here, not in a worker."""
    out = [
        {
            "method": c["method"],
            "dataset": c["dataset"],
            "fold": c["fold"],
            "seed": 10 * c["seed"] + c["fold"],
            "rounds": c["rounds"],
            "words": c["words"],
            "eval_every": c["eval-every"],
            "data": str(data_dir(c)),
            "extra": dict(c["run-config"]),
            "work": str(work or WORK),
        }
        for c in cells
    ]
    try:
        for j in {(j["dataset"], j["fold"], j["data"]): j for j in out}.values():
            settings_of(j).check_maps()
    except Exception as e:  # one line naming the file
        raise ValueError(str(e)) from None
    return out


def run_jobs(jobs: list[dict], n_jobs: int) -> pd.DataFrame:
    from envs.word_vectors import word_vectors

    word_vectors(jobs[0]["data"])  # train/cache once before the workers read it

    def order(j):  # FedRL first: the longest
        return not j["method"].startswith("fedrl")

    return table_runs.run_jobs(jobs, n_jobs, cached_run, job_key, order, "text2action runs")


# --- Table 2's analysis (experiments/studies/fedrl_table2.toml) ---


def outputs(study: dict) -> list[Path]:
    name = study["name"]
    return [RESULTS / f"{name}{sfx}" for sfx in (".csv", "_runs.csv", ".png", "_paired.csv")]


def report(runs: pd.DataFrame, study: dict, command: str) -> str:
    """The table (paper beside), the runs, the figure, and the paired comparisons."""
    out_csv, runs_csv, png, paired_csv = outputs(study)
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs.assign(command=command).to_csv(runs_csv, index=False)
    table = summarize(runs)
    table.to_csv(out_csv, index=False)
    plot(runs, png, command)
    pairs = paired(runs)
    pairs.to_csv(paired_csv, index=False)
    return markdown(table) + "\n\n" + pairs.to_string(index=False)


def replot(study: dict) -> int:
    _, runs_csv, png, _ = outputs(study)
    return redraw(runs_csv, lambda runs, c: plot(runs, png, c))
