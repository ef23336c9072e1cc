"""The run layer of FedRL's two table studies (experiments/study.py's kinds "fedrl-gridworld",
Table 1's, experiments/fedrl/table1.py, and "fedrl-text2action", Table 2's, table2.py), and the
figure both draw. A run trains one method in this process (experiments/fedrl/local.py says who
acts on what) and gives one row per checkpoint, best-valid and last, and for FedRL per
test-noise setting; it is kept in the study's work folder under its fingerprint, so a study
resumes. A table module says only what is its own: a job's settings and name, the scores and
settings its rows carry, and its progress line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from config import parse
from experiments import figures
from experiments.fedrl import STUDY, numerics
from experiments.simulate import cached, in_parallel, job_fingerprint

# bumped when the FedRL exchange changes what a run computes (2: updates ride on the acting
# messages, the newest step's transitions join the replay one round later): older runs retrain
EXCHANGE = 2


def settings_of(job: dict, config: dict):
    """A job's settings: the study mode (experiments/fedrl.STUDY), its seed, the table's
    `config` for it, then the study's run-config overrides, over the defaults."""
    from config.schema import merged
    from training.fedrl_setup import Settings

    return Settings.of(parse(merged({**STUDY, "seed": job["seed"], **config, **job["extra"]})))


def streams_of(method: str, settings) -> dict:
    """The fingerprint's word for a method scored over several evaluation streams
    (training/fedrl_baselines.eval_streams; none for one stream, so FedRL's and the -full
    networks' cached runs keep their fingerprints)."""
    from training.fedrl_baselines import eval_streams

    n = eval_streams(method, settings)
    # version 2: one seed word per stream (training/fedrl_baselines.stream_ids)
    return {"eval_streams": n, "stream_ids": 2} if n > 1 else {}


def fingerprint(job: dict, settings, data_field: str, method: str) -> str:
    """Everything that decides a job's numbers (experiments/simulate.run_fingerprint): the
    settings it resolves to (defaults included), the bytes of the data `data_field` names, the
    job's method, rounds and evaluation cadence, the exchange version, the floating-point
    kernels and the evaluation streams of `method` (the one trained)."""
    return job_fingerprint(
        settings, data_field, job, EXCHANGE, numerics=numerics(), **streams_of(method, settings)
    )


def train_rows(job: dict, method: str, settings, fp: str, scores, fields) -> list[dict]:
    """Train `method` for the job's rounds (best-valid model selection every `eval_every`)
    and return its rows: the job's method, its `fields(last)` keys before the scores, then per
    checkpoint `scores(last, pre, sfx)` (`pre` "best-" or "", `sfx` the test-noise suffix of
    the last training row's keys), `fields(last)`'s other keys and the run's provenance."""
    import torch

    from training.fedrl_baselines import train

    torch.set_num_threads(1)
    settings.check_maps()
    last = train(method, settings, job["rounds"], eval_every=job["eval_every"], log=None)[-1]
    ident, rest = fields(last)
    tail = {"exchange": EXCHANGE, "numerics": numerics(), "fingerprint": fp,
            "wall_s": round(last["wall_s"], 1)}  # fmt: skip
    out = []
    for noise in ("on", "off") if method == "fedrl" else ("",):
        sfx = f"-test_noise={noise}" if noise else ""
        for ckpt, pre in (("best", "best-"), ("last", "")):
            head = {**ident, "test_noise": noise, "checkpoint": ckpt}
            out.append({**head, **scores(last, pre, sfx), **rest, **tail})
    return out


def cached_rows(job: dict, key: str, fp: str, train, describe) -> list[dict]:
    """The job's rows from its work folder if trained under `fp`, else `train()`'s, saved."""
    return cached(Path(job["work"]) / f"{key}.json", fp, train, describe)


def run_jobs(jobs: list[dict], n_jobs: int, run, key, order, desc: str) -> pd.DataFrame:
    """`run(job)` (a table's cached run) over the jobs, `n_jobs` processes at a time, sorted
    by `order(job)` (the longest first, so the pool's tail is short)."""
    work = Path(jobs[0]["work"])
    work.mkdir(parents=True, exist_ok=True)
    there = sum((work / f"{key(j)}.json").exists() for j in jobs)
    print(f"{len(jobs)} runs ({there} found in {work}), {n_jobs} at a time", flush=True)
    done = in_parallel(run, sorted(jobs, key=order), n_jobs, desc, processes=True)
    return pd.DataFrame([r for rows in done for r in rows])


def bars(panels: list[tuple], rows: list, col: str, paper_label: str, path: Path, command: str):
    """A table's figure: one panel per (title, y label, runs, the paper's values per row), our
    mean ± sd of `col` (in %) at the best and last checkpoints per table row (label, method,
    test noise, paper keys), the paper's value(s) hatched beside."""
    fig, axes = figures.subplots(1, len(panels), figsize=(5 * len(panels), 4.2), squeeze=False)
    labels = [r[0] for r in rows]
    x = np.arange(len(labels))
    for ax, (title, ylabel, runs, paper) in zip(axes[0], panels):
        for j, ckpt in enumerate(("best", "last")):
            vals = [
                runs[(runs.method == method) & (runs.test_noise.fillna("") == noise)
                     & (runs.checkpoint == ckpt)][col].to_numpy() * 100
                for _, method, noise, _ in rows
            ]  # fmt: skip
            means = [v.mean() if len(v) else np.nan for v in vals]
            sds = [v.std(ddof=1) if len(v) > 1 else 0 for v in vals]
            ax.bar(x + (j - 1) * 0.28, means, 0.28, yerr=sds, capsize=2,
                   label=f"ours, {ckpt} checkpoint (mean ± sd)")  # fmt: skip
        # the paper's value(s): the bar at their mean, the whisker spanning them where the
        # paper prints two (FedRL-1 / FedRL-2); rows without one stay empty
        mean = [np.mean(v) if v else np.nan for v in paper]
        err = [[m - min(v) if v else 0 for m, v in zip(mean, paper)],
               [max(v) - m if v else 0 for m, v in zip(mean, paper)]]  # fmt: skip
        ax.bar(x + 0.28, mean, 0.28, color="none", edgecolor="k", hatch="//", yerr=err,
               label=paper_label)  # fmt: skip
        ax.set_xticks(x, labels, rotation=35, ha="right", fontsize=8)
        ax.set(ylim=(0, 105), title=title, **({"ylabel": ylabel} if ylabel else {}))
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    figures.save(fig, path, command)
