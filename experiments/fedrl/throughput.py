"""FedRL's exchange settings: Flower's round against the same party code in one process, and what
each setting costs in success (the goal: the default >= 0.5 of the one-process throughput and
within the seed spread of the best SuccRate). The analysis of the study file

    python -m experiments.study experiments/studies/fedrl_throughput.toml   # ~45 min

A setting is B,S,K (an arm's run-config): B environments per acting message, S acting steps per
round (2 messages each; the round's K minibatch updates ride on the last step's two,
server/fedrl_run.py).

Success: the study's runs (Table 1's run layer and cache, experiments/fedrl/table1.py): the
paper's 8x8 maps and rules, 3 seeds, every setting the same number of transitions (`[report]
transitions` = rounds x B x S, checked before anything trains) and valid checks every 1,280
transitions; test_noise on. The random policy of both parties (`random-both`) is the floor, the
paper's FedRL-1 / -2 at 8x8 the reference.

Throughput: after the runs, on the then idle machine, each setting (a) through `simulation.py
fedrl` (real ServerApp and ClientApps, Ray) and (b) as direct calls to the same party code in
one process with no Flower (`training.fedrl_protocol.DirectTransport`), back to back, one torch
thread each, for `[report] timing-rounds` rounds. Measured on the median round after the first
updates (rounds 3 .. R-1: round 1 pays Ray's start-up, the last the final evaluation). ratio =
one-process round time / Flower round time, i.e. Flower's share of the one-process throughput
(env steps and updates per second alike: same work per round).

Writes experiments/results/fedrl_throughput.csv (a row per setting), fedrl_throughput_runs.csv
(the success runs) and fedrl_throughput.png.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from config import parse
from config.papers import FEDRL_TABLE1
from experiments import figures
from experiments.simulate import RESULTS, machine_label, simulate
from experiments.tables import redraw

FLOOR = "random-both"  # neither party learns: what a setting must beat to have learnt anything
KEYS = ("fedrl.envs", "fedrl.act-steps", "fedrl.updates")


def settings(study: dict) -> list[tuple[int, int, int, int]]:
    """(B, S, K, rounds) of each FedRL arm; refuses (naming the field) an arm whose rounds x B
    x S is not `[report] transitions`, so every setting sees the same data."""
    from config.schema import merged

    where, grid = study["file"], study["grid"]
    want = study.get("report", {}).get("transitions")
    if not isinstance(want, int) or want <= 0:
        raise ValueError(f"{where}: report.transitions: the transitions every run collects")
    timing = study.get("report", {}).get("timing-rounds")
    if not isinstance(timing, int) or timing < 4:
        raise ValueError(f"{where}: report.timing-rounds: at least 4 (rounds 3 .. R-1 are timed)")
    out = []
    for arm in grid.get("arms", []):
        if arm.get("methods", grid.get("methods")) == [FLOOR]:
            continue
        for rc in arm.get("run-config", [{}]):
            cfg = merged({**grid.get("run-config", {}), **rc})
            b, s, k = (cfg[key] for key in KEYS)
            rounds = arm.get("rounds", grid.get("rounds"))
            if rounds * b * s != want:
                raise ValueError(
                    f"{where}: grid.arms: {b},{s},{k} runs {rounds} rounds x {b * s} "
                    f"transitions, not report.transitions = {want}"
                )
            out.append((b, s, k, rounds))
    return out


def outputs(study: dict) -> list[Path]:
    settings(study)  # checked before anything trains
    return [RESULTS / f"{study['name']}{sfx}" for sfx in (".csv", "_runs.csv", ".png")]


def run_config(b: int, s: int, k: int) -> dict:
    # updates start in round 2; the final evaluation is kept short (4 valid maps, no test split)
    return {
        "fedrl.envs": b,
        "fedrl.act-steps": s,
        "fedrl.updates": k,
        "fedrl.warmup": b * s,
        "fedrl.eval-episodes": 4,
        "fedrl.test-maps": "",
        "client-threads": 1,
        "eval-every": 100000,
    }


def local_round_times(cfg: dict, rounds: int) -> list[float]:
    import torch

    from config.schema import merged
    from training.fedrl_protocol import DirectTransport
    from training.fedrl_setup import Settings

    torch.set_num_threads(1)
    runner = DirectTransport(Settings.of(parse(merged(cfg))))
    times = []
    for rnd in range(1, rounds + 1):
        t0 = time.perf_counter()
        runner.round(rnd == rounds)
        times.append(time.perf_counter() - t0)
    return times


def timing(b: int, s: int, k: int, rounds: int, work: Path) -> dict:
    cfg = run_config(b, s, k)
    text = " ".join(f"{key}={v!r}".replace("'", '"') for key, v in cfg.items())
    run_dir = simulate("fedrl", work / f"{b}-{s}-{k}", rounds=rounds, seed=0, run_config=text)
    flower = pd.read_csv(run_dir / "rounds.csv")
    steady = flower[(flower["round"] >= 3) & (flower["round"] < rounds)]
    t_flower = float(steady["wall_s"].median())
    msgs = float(steady["messages"].diff().median())
    t_local = float(np.median(local_round_times(cfg, rounds)[2:-1]))
    return {
        "messages_per_round": msgs,
        "flower_round_s": round(t_flower, 3),
        "local_round_s": round(t_local, 3),
        "flower_env_steps_per_s": round(b * s / t_flower, 1),
        "flower_updates_per_s": round(k / t_flower, 1),
        "local_updates_per_s": round(k / t_local, 1),
        "ratio": round(t_local / t_flower, 3),
    }


def summarize(runs: pd.DataFrame, rows: list[dict]) -> pd.DataFrame:
    """The timing rows with each setting's SuccRate (mean and sd over seeds, best and last
    checkpoint) and whether it is within the seed spread of the best: no lower than the best
    setting's mean minus its sd."""
    from config.schema import merged

    table = pd.DataFrame(rows)
    default = tuple(merged({})[key] for key in KEYS)
    table["default"] = [(r.B, r.S, r.K) == default for r in table.itertuples()]
    fed = runs[runs.method == "fedrl"]
    for ck in ("best", "last"):
        g = fed[fed.checkpoint == ck].groupby(["envs", "act_steps", "updates_per_round"])
        stats = g.succ_rate.agg(["mean", "std", "count"]) * [100, 100, 1]
        m = stats.loc[list(zip(table.B, table.S, table.K))]
        table[f"succ_{ck}_mean"] = m["mean"].round(1).to_numpy()
        table[f"succ_{ck}_sd"] = m["std"].round(1).to_numpy()
        table["seeds"] = int(stats["count"].min())
    top = table.loc[table.succ_best_mean.idxmax()]
    table["within_spread_of_best"] = table.succ_best_mean >= top.succ_best_mean - top.succ_best_sd
    floor = runs[(runs.method == FLOOR) & (runs.checkpoint == "best")].succ_rate * 100
    table["floor_random_both"] = round(floor.mean(), 1)
    table["paper_fedrl_1_2"] = " / ".join(
        f"{FEDRL_TABLE1[(k, 'succ')][0]:g}" for k in ("fedrl-1", "fedrl-2")
    )
    return table


def report(runs: pd.DataFrame, study: dict, command: str) -> str:
    """Time every setting (the runs are done: the machine is idle), then write the table, the
    success runs and the figure."""
    from experiments.bench.performance_table import markdown

    out_csv, runs_csv, png = outputs(study)
    runs = runs[runs.test_noise.isin(["on", ""])]
    machine, rows = machine_label(), []
    work = Path(tempfile.mkdtemp(prefix="fedrl-throughput-"))
    for b, s, k, rounds in settings(study):  # one at a time
        t = timing(b, s, k, study["report"]["timing-rounds"], work)
        rows.append({"B": b, "S": s, "K": k, "update_ratio": k / (b * s), **t,
                     "machine": machine, "rounds": rounds})  # fmt: skip
        print(rows[-1], flush=True)
    shutil.rmtree(work, ignore_errors=True)
    table = summarize(runs, rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs.assign(command=command).to_csv(runs_csv, index=False)
    table.assign(command=command).to_csv(out_csv, index=False)
    plot(table, runs, png, command)
    return markdown(fedrl=True)


def replot(study: dict) -> int:
    out_csv, runs_csv, png = outputs(study)
    return redraw(out_csv, lambda table, cmd: plot(table, pd.read_csv(runs_csv), png, cmd))


def plot(table: pd.DataFrame, runs: pd.DataFrame, png: Path, command: str) -> None:
    """Left: each setting's share of the one-process throughput, the goal (0.5) drawn. Right:
    its test SuccRate at the best-valid checkpoint (mean ± sd, every seed a dot), the random
    floor and the paper's FedRL-1 / -2 drawn."""
    labels = [f"{r.B}x{r.S}, K={r.K}" + (" (default)" if r.default else "") for r in table.itertuples()]  # fmt: skip
    y = np.arange(len(table))
    fig, (left, right) = figures.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    left.barh(y, table.ratio, 0.6, color="tab:blue", alpha=0.6)
    left.axvline(0.5, color="tab:red", lw=2, label="goal for the default: 0.5")
    left.axvline(1.0, color="grey", ls="--", label="one process, no Flower = 1")
    left.set(yticks=y, yticklabels=labels, xlabel="one-process round time ÷ Flower's",
             title="Flower's share of the one-process throughput")  # fmt: skip
    left.legend(fontsize=7, loc="lower right")
    right.errorbar(table.succ_best_mean, y, xerr=table.succ_best_sd, fmt="o", capsize=3,
                   color="tab:blue", label="ours (best valid), mean ± sd")  # fmt: skip
    fed = runs[(runs.method == "fedrl") & (runs.checkpoint == "best")]
    for i, r in enumerate(table.itertuples()):
        seeds = fed[(fed.envs == r.B) & (fed.act_steps == r.S) & (fed.updates_per_round == r.K)]
        right.plot(seeds.succ_rate * 100, np.full(len(seeds), i), ".", color="tab:blue", alpha=0.5)
    right.axvline(table.floor_random_both.iloc[0], color="black", ls=":",
                  label="floor: random α and β")  # fmt: skip
    for k, v in enumerate(str(table.paper_fedrl_1_2.iloc[0]).split(" / ")):
        right.axvline(
            float(v), color="tab:green", ls=("-", "--")[k], label=f"paper FedRL-{k + 1}: {v}"
        )
    right.set(xlabel="test SuccRate %, 8x8 paper maps (test_noise on)",
              title="Success at the same transitions")  # fmt: skip
    right.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    figures.save(fig, png, command)
