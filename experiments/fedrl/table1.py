"""The FedRL paper's Table 1 (Grid-World 8/16/32) under both rule sets, the paper's beside ours,
and what every Grid-World study's runs are (the study kind "fedrl-gridworld" of
experiments/study.py; the run layer it shares with Table 2: experiments/fedrl/table_runs.py):

    python -m experiments.study experiments/studies/fedrl_table1.toml

Methods (experiments/fedrl/local.py says who acts on what): FCN-alpha, DQN-alpha, FedRL
(test_noise on / off), FCN-full, DQN-full, and two floors that learn nothing: alpha moving
uniformly at random with beta staying, and both moving at random. Every method gets the same
maps, rules, T_m, rounds (B envs x S steps, then K updates per round), exploration, replay and
model selection: valid every `eval-every` rounds, the best-valid checkpoint kept; each run is
scored on the score split at the best checkpoint (`best`, what the paper and the reference's
main.py report) and at the last round (`last`).

Maps: a study's `map-dir` names a folder of gridworld_o_<n>.mat files. With all 8000 maps the
paper's split is used (train 0-6399, valid 6400-7199, test 7200-7999). Our shared copy holds
maps 0-7199 only (the test maps are kept aside), so by default the paper's valid range is
halved: 6400-6799 selects the checkpoint and 6800-7199 is scored (scoring the maps that selected
it would flatter every method); `maps = {train = "A-B", ...}` overrides a split. Without
`map-dir`: the embedded generated maps (8000 per size, paper split). The maps used per split,
and why any were skipped, are printed and saved in the per-run CSV.

Each run is saved as it finishes (runs/fedrl_table1/, or the runner's `--work`) and a rerun
skips runs already there under the same fingerprint, so a study resumes. Results go to
experiments/results/<name>{,_runs}.csv and <name>_<rules>.png.
FedRL runs in one process (experiments/fedrl/local.py: the Flower app's protocol as direct
calls; tests/test_fedrl.py checks both compute the same). The paper's FedRL-1 / FedRL-2 labels
contradict each other (Sec. 5.1 calls FedRL-1 "adding" noise at test time, Figure 4's text the
opposite), so our columns say what they are: test_noise=on | off; the paper's pair is drawn
beside both.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from config.papers import FEDRL_TABLE1, FEDRL_TABLE1_SIZES
from experiments.fedrl import table_runs
from experiments.simulate import RESULTS, ROOT
from experiments.tables import mean_sd, pipe_table, redraw

# Table 1 of the paper (SuccRate %, AvgRwd) at 8/16/32; FedRL-1/-2 as printed.
PAPER = FEDRL_TABLE1  # config/papers.py: the one copy
SIZES = FEDRL_TABLE1_SIZES
# label, method, test_noise, paper key(s)
ROWS = [
    ("random α (β stays)", "random-alpha", "", ()),
    ("random α and β", "random-both", "", ()),
    ("FCN-alpha", "fcn-alpha", "", ("fcn-alpha",)),
    ("DQN-alpha", "dqn-alpha", "", ("dqn-alpha",)),
    ("FedRL test_noise=on", "fedrl", "on", ("fedrl-1", "fedrl-2")),
    ("FedRL test_noise=off", "fedrl", "off", ("fedrl-1", "fedrl-2")),
    ("FCN-full", "fcn-full", "", ("fcn-full",)),
    ("DQN-full", "dqn-full", "", ("dqn-full",)),
]
METHODS = list(dict.fromkeys(r[1] for r in ROWS))


def paper_value(keys: tuple, metric: str, size: int) -> str:
    vals = [PAPER[(k, metric)][SIZES.index(size)] for k in keys if (k, metric) in PAPER]
    return " / ".join(f"{v:g}" for v in vals)


def splits_for(map_file: str | None, args) -> dict[str, str]:
    """train/valid/test ranges from a script's --train-maps/--valid-maps/--test-maps flags."""
    flags = {k: getattr(args, f"{k}_maps") for k in ("train", "valid", "test")}
    return split_of(map_file, {k: v for k, v in flags.items() if v})


def split_of(map_file: str | None, maps: dict) -> dict[str, str]:
    """train/valid/test ranges: the paper's split of what the file holds, `maps` over it."""
    from envs.gridworld import load_mat, paper_split

    count = load_mat(map_file).count if map_file else 8000
    return paper_split(count) | {k: str(v) for k, v in maps.items()}


def job_key(job: dict) -> str:
    extra = "_".join(f"{k.split('.')[-1]}={v}" for k, v in sorted(job["extra"].items()))
    return (
        (
            f"{job['method']}_{job['rules']}_n{job['size']}_s{job['seed']}_r{job['rounds']}"
            + (f"_{extra}" if extra else "")
        )
        .replace("/", "-")
        .replace(" ", "")
    )


def settings_of(job: dict):
    return table_runs.settings_of(
        job,
        {
            "fedrl.size": job["size"],
            "fedrl.rules": job["rules"],
            "fedrl.map-file": job["map_file"] or "",
            **{f"fedrl.{k}-maps": v for k, v in job["ranges"].items()},
        },
    )


def fingerprint(job: dict) -> str:
    """experiments/fedrl/table_runs.fingerprint, the map file's bytes its data."""
    return table_runs.fingerprint(job, settings_of(job), "map_file", job["method"])


def one_run(job: dict) -> list[dict]:
    """Train and score one (method, rules, size, seed); rows per checkpoint and noise setting."""
    from training.fedrl_baselines import eval_streams

    s = settings_of(job)
    score = "test" if len(s.test) else "valid"
    maps = s.map_report()

    def scores(last, pre, sfx):
        return {
            "split": score,
            "succ_rate": last[f"{pre}{score}-succ-rate{sfx}"],
            "avg_reward": last[f"{pre}{score}-avg-reward{sfx}"],
            # each evaluation stream's score (training/fedrl_baselines.EVAL_STREAMS)
            "eval_streams": eval_streams(job["method"], s),
            "succ_rate_streams": json.dumps(last.get(f"{pre}{score}-succ-rate{sfx}-streams", [])),
        }

    def fields(last):
        # each party's own ledger at the end of the run (a FedRL row must carry it: KeyError,
        # never a silent 0); a method that releases nothing spends nothing
        fed = job["method"] == "fedrl"
        ledger = {
            f"{col}_{party}": float(last[f"{party}-{key}"]) if fed else 0.0
            for party in ("alpha", "beta")
            for col, key in (("eps", "privacy-epsilon"), ("releases", "max-releases"))
        }
        ident = {k: job[k] for k in ("method", "rules", "size", "seed")}
        return ident, {
            "best_round": last["best-round"],
            "rounds": job["rounds"],
            "transitions": job["rounds"] * s.envs * s.act_steps,
            "updates": job["rounds"] * s.updates,
            "update_ratio": s.update_ratio,
            "history": s.history_len,
            "updates_per_round": s.updates,
            "eps_decay": s.eps_decay,
            "target_update": s.target_every,
            "envs": s.envs,
            "lr": s.lr,
            "act_steps": s.act_steps,
            "sigma": s.sigma,
            **ledger,
            "maps_used": json.dumps({k: v["used"] for k, v in maps.items()}),
            "maps_skipped": json.dumps({k: v["maps"] - v["used"] for k, v in maps.items()}),
        }

    return table_runs.train_rows(job, job["method"], s, fingerprint(job), scores, fields)


def cached_run(job: dict) -> list[dict]:
    """A finished run from the work folder, if it was trained under this job's fingerprint
    (another map file, range, rule, setting, default or exchange: trained again)."""

    def describe(out: list[dict]) -> str:
        best = [r for r in out if r["checkpoint"] == "best"]
        return (
            f"  {job['method']:12s} {job['rules']:9s} {job['size']:2d}x{job['size']:<2d} seed "
            f"{job['seed']}: "
            + ", ".join(f"{r['test_noise'] or 'succ'} {r['succ_rate']:.3f}" for r in best)
            + f" (best at round {out[0]['best_round']}, {out[0]['wall_s']:.0f} s)"
        )

    return table_runs.cached_rows(
        job, job_key(job), fingerprint(job), lambda: one_run(job), describe
    )


def run_jobs(jobs: list[dict], n_jobs: int) -> pd.DataFrame:
    def order(j):  # the largest maps first, the floors last
        return -j["size"], j["method"].startswith("random")

    return table_runs.run_jobs(jobs, n_jobs, cached_run, job_key, order, "fedrl runs")


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for rules in sorted(runs.rules.unique()):
        for metric, col, scale, key in (
            ("SuccRate %", "succ_rate", 100.0, "succ"),
            ("AvgRwd", "avg_reward", 1.0, "rwd"),
        ):
            for label, method, noise, paper in ROWS:
                row = {"rules": rules, "metric": metric, "method": label}
                for size in sorted(runs["size"].unique()):
                    sel = runs[
                        (runs.rules == rules)
                        & (runs.method == method)
                        & (runs["size"] == size)
                        & (runs.test_noise.fillna("") == noise)
                    ]
                    for ckpt in ("best", "last"):
                        vals = sel[sel.checkpoint == ckpt][col].to_numpy() * scale
                        row[f"{size}x{size} ours {ckpt}"] = mean_sd(vals)
                    row[f"{size}x{size} seeds"] = sel.seed.nunique()
                    row[f"{size}x{size} paper"] = paper_value(paper, key, size)
                rows.append(row)
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    """The summary as the README shows it: one table per rule set, best | last | paper."""
    sizes = sorted({int(c.split("x")[0]) for c in table.columns if c.endswith(" paper")})
    out = []
    for rules, t in table.groupby("rules", sort=False):
        head = ["metric", "method"] + [
            f"{n}x{n} {c}" for n in sizes for c in ("best", "last", "paper")
        ]
        rows = [
            [r.metric, r.method]
            + [r[f"{n}x{n} {c}"] for n in sizes for c in ("ours best", "ours last", "paper")]
            for _, r in t.iterrows()
        ]
        out += [f"**{rules} rules**", "", pipe_table(head, rows)]
        out.append("")
    return "\n".join(out)


def plot(runs: pd.DataFrame, rules: str, path: Path, command: str) -> None:
    """Success rate per map size under one rule set, the paper's Table 1 beside."""
    panels = [
        (f"{n}x{n}, {rules} rules: SuccRate %", "",
         runs[(runs.rules == rules) & (runs["size"] == n)],
         [[PAPER[(k, "succ")][SIZES.index(n)] for k in p] for *_, p in ROWS])
        for n in sorted(runs["size"].unique())
    ]  # fmt: skip
    table_runs.bars(panels, ROWS, "succ_rate", "paper Table 1", path, command)


# --- the study kind "fedrl-gridworld" (experiments/study.py): one cached run per cell ---

CROSSED = {"sizes": "size", "rules": "rules", "seeds": "seed", "methods": "method"}

CELL = {"method", "rules", "size", "seed", "rounds", "eval-every", "map-dir", "maps", "run-config"}
WORK = ROOT / "runs" / "fedrl_table1"  # where finished runs are kept (every FedRL study shares it)


def crossed(study: dict) -> dict[str, str]:
    """The grid's list fields crossed into cells (experiments/study.cells)."""
    return CROSSED


def check(cell: dict, where) -> None:
    """One study cell's fields (ValueError naming the study file and the field)."""
    from experiments.study import check_cell

    check_cell(cell, where, CELL, METHODS)
    if cell["rules"] not in ("paper", "reference"):
        raise ValueError(f"{where}: grid.rules: {cell['rules']!r} is not paper or reference")
    if cell["size"] not in SIZES:
        raise ValueError(f"{where}: grid.sizes: {cell['size']!r} is not one of {list(SIZES)}")
    if set(cell.get("maps", {})) - {"train", "valid", "test"}:
        raise ValueError(f"{where}: grid.maps: only train, valid and test, got {cell['maps']}")
    rounds = rounds_of(cell)
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds <= 0:
        raise ValueError(
            f"{where}: grid.rounds: a positive number, or one per size, at {cell['size']}"
        )
    if not isinstance(cell.get("eval-every", 10), int) or cell.get("eval-every", 10) <= 0:
        raise ValueError(f"{where}: grid.eval-every: a positive number")
    f = map_file(cell)
    if f and not Path(f).is_file():
        raise ValueError(f"{where}: grid.map-dir: {f} not found")


def rounds_of(cell: dict):
    """`rounds`: one number, or a table of one per size ({8 = 200, 16 = 300})."""
    r = cell.get("rounds")
    return r.get(str(cell["size"])) if isinstance(r, dict) else r


def map_file(cell: dict) -> str:
    """The paper's maps of the cell's size under `map-dir` (relative to the project), or ""
    for the embedded generated maps."""
    d = cell.get("map-dir", "")
    return str((ROOT / d / f"gridworld_o_{cell['size']}.mat").resolve()) if d else ""


def jobs(cells: list[dict], work: Path | None) -> list[dict]:
    """The run layer's job dicts (`cached_run`): the maps' split read once per file."""
    out, ranges = [], {}
    for c in cells:
        f = map_file(c)
        key = (f, tuple(sorted(c.get("maps", {}).items())))
        if key not in ranges:
            ranges[key] = split_of(f, c.get("maps", {}))
            print(f"{c['size']}x{c['size']}: maps {ranges[key]} from {f or 'generated maps'}")
        out.append(
            {
                "method": c["method"],
                "rules": c["rules"],
                "size": c["size"],
                "seed": c["seed"],
                "rounds": rounds_of(c),
                "eval_every": c.get("eval-every", 10),
                "map_file": f,
                "ranges": ranges[key],
                "extra": dict(c["run-config"]),
                "work": str(work or WORK),
            }
        )
    return out


# --- Table 1's analysis (experiments/studies/fedrl_table1*.toml) ---


def outputs(study: dict) -> list[Path]:
    name = study["name"]
    pngs = [RESULTS / f"{name}_{r}.png" for r in _rules(study)]
    return [RESULTS / f"{name}.csv", RESULTS / f"{name}_runs.csv", *pngs]


def _rules(study: dict) -> list[str]:
    grid = study["grid"]
    seen = grid.get("rules", []) + [r for a in grid.get("arms", []) for r in a.get("rules", [])]
    return list(dict.fromkeys(seen))


def report(runs: pd.DataFrame, study: dict, command: str) -> str:
    out_csv, runs_csv, *pngs = outputs(study)
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs.assign(command=command).to_csv(runs_csv, index=False)
    table = summarize(runs)
    table.to_csv(out_csv, index=False)
    for rules, png in zip(_rules(study), pngs):
        plot(runs, rules, png, command)
    return markdown(table)


def replot(study: dict) -> int:
    _, runs_csv, *pngs = outputs(study)
    return redraw(
        runs_csv, lambda runs, c: [plot(runs, r, p, c) for r, p in zip(_rules(study), pngs)]
    )
