"""Reliability of every method in Flower's simulation engine, as an operator would try it.

    python -m experiments.study experiments/studies/reliability.toml --jobs 1   # ~20 min

The study file gives each method's small study (seed, rounds, its run config and the metric
compared) and the faults; each method is one call of `study`, four runs in the work folder
(`runs/reliability/<method>/<condition>`, kept, so a rerun resumes):
* clean: no faults (the reference);
* faults: 20% of training calls raise (`faults.fraction=0.2`, drawn per call);
* hang: silo / party 1 hangs 120 s in round `hang-round` (`faults.hang-partitions`);
* kill: the launcher, its SuperLink, ServerApp and Ray workers get SIGKILL (a crash) once
  round `kill-after` is in rounds.csv, then `simulation.py M --resume DIR` finishes the run.

Columns: faulty calls injected (recomputed from clients/faults.fault_of for every call that was
sent) and recorded in clients.csv, updates wrongly aggregated (an injected call whose row says
ok, or rounds whose n_accepted differs from their ok rows: must be 0), rounds completed, the
time the hung silo cost (the hung round's wall time minus the median of the others), and the
final metric of the clean run beside the killed-and-resumed one. `--jobs 1`: the hung round's
cost is an adaptive timeout (a multiple of the slowest earlier exchange), so a second study
beside it would lengthen it. Results: experiments/results/reliability{,_runs}.csv and
reliability.png; the README table is `markdown`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd

from clients.faults import fault_of
from config import parse
from config.schema import merged
from experiments import figures
from experiments.simulate import ROOT
from launch.lifetime import child_env
from launch.superlink import processes_with_token
from strategies.floors import GLOBAL_RMSE, headline_rmse


def finished(out: Path, rounds: int) -> bool:
    return (out / "rounds.csv").is_file() and len(pd.read_csv(out / "rounds.csv")) >= rounds


def launch(spec: dict, out: Path, extra: str, kill_after: int = 0) -> dict:
    """simulation.py into `out` (skipped when it already finished, or when it ended before
    and `launched.json` kept how: a run the hang stops is an outcome, and its folder takes no
    second run); returns exit code and wall time. With kill_after, SIGKILL once that many
    rounds are in rounds.csv."""
    if finished(out, spec["rounds"]):
        return {"code": 0, "wall_s": float("nan")}
    if (out / "launched.json").is_file():
        return json.loads((out / "launched.json").read_text())
    flags = ["--num-clients", str(spec["num_clients"])] if spec["num_clients"] else []
    cmd = [sys.executable, str(ROOT / "simulation.py"), spec["method"],
           "--rounds", str(spec["rounds"]), "--seed", str(spec["seed"]), "--out", str(out),
           "--no-plots", *flags, "--run-config", f"{spec['config']} {extra}".strip()]  # fmt: skip
    print("$", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    token = f"reliability-{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**child_env(), "FEDEMBODIED_RUN_TOKEN": token},  # ends with the study
    )
    while kill_after and proc.poll() is None:
        done = len(pd.read_csv(out / "rounds.csv")) if (out / "rounds.csv").is_file() else 0
        if done >= kill_after:  # a crash: SIGKILL to the launcher and everything it runs
            for pid in [proc.pid, *processes_with_token(token)]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            break
        time.sleep(0.05)
    _, err = proc.communicate()
    for pid in processes_with_token(token):  # a killed run leaves nothing running
        os.kill(pid, signal.SIGKILL)
    if proc.returncode not in (0, None) and not kill_after:
        print(err[-2000:], file=sys.stderr)
    got = {"code": proc.returncode, "wall_s": time.perf_counter() - t0,
           "error": (err.strip().splitlines() or [""])[-1][:200]}  # fmt: skip
    if not kill_after:  # a killed run is resumed, not launched again
        out.mkdir(parents=True, exist_ok=True)
        (out / "launched.json").write_text(json.dumps(got))
    return got


def resume(method: str, out: Path, rounds: int) -> dict:
    if finished(out, rounds):
        return {"code": 0}
    cmd = [sys.executable, str(ROOT / "simulation.py"), method, "--resume", str(out), "--no-plots"]
    print("$", " ".join(cmd), flush=True)
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=child_env())
    return {"code": res.returncode, "error": (res.stderr.strip().splitlines() or [""])[-1][:200]}


def fault_counts(method: str, out: Path) -> dict:
    """Injected (recomputed per sent training call), recorded, and wrongly aggregated."""
    clients = pd.read_csv(out / "clients.csv")
    rounds = pd.read_csv(out / "rounds.csv")
    cfg = merged(json.loads((out / "config.json").read_text()))
    rec = clients.status.astype(str).str.contains("injected fault")
    if method == "fedrl":  # each step is a call; a retried call draws again
        return {"injected": int(rec.sum()), "recorded": int(rec.sum()), "wrongly_aggregated": 0}
    sent = clients[clients.partition.notna() & (clients.stage == clients.stage.iloc[0])]
    injected = sum(
        fault_of(parse(cfg), int(r.partition), int(r["round"])) is not None
        for _, r in sent.iterrows()
    )
    ok = clients[clients.status == "ok"].groupby("round").size()
    wrong = int((rec & (clients.status == "ok")).sum())
    if "n_accepted" in rounds:
        wrong += int(
            (
                rounds.set_index("round")["n_accepted"].fillna(0)
                != ok.reindex(rounds["round"]).fillna(0).values
            ).sum()
        )
    return {"injected": int(injected), "recorded": int(rec.sum()), "wrongly_aggregated": wrong}


def study(
    method: str,
    num_clients: int,
    config: str,
    metric: str,
    faulty: str,
    hang: str,
    hang_round: int,
    rounds: int,
    kill_after: int,
    seed: int,
    work,
) -> dict:
    """One method's four runs (clean, faults, hang, kill + resume) in `work`/<method>; its row."""
    spec = {"method": method, "num_clients": num_clients, "config": config, "rounds": rounds,
            "seed": seed}  # fmt: skip
    conditions = {"clean": "", "faults": faulty, "hang": f'{hang} faults.rounds="{hang_round}"'}
    row: dict = {"method": method, "rounds": rounds, "hang_round": hang_round}
    base = Path(work) / method
    for name, extra in conditions.items():
        res = launch(spec, base / name, extra)
        out = base / name
        done = pd.read_csv(out / "rounds.csv") if (out / "rounds.csv").is_file() else None
        row[f"{name}_exit"] = res["code"]
        row[f"{name}_rounds"] = 0 if done is None else int(done["round"].max())
        if name == "faults" and done is not None:
            row.update(fault_counts(method, out))
        if name == "hang" and done is not None:
            walls = done.set_index("round")["wall_s"]
            row["hang_round_s"] = float(walls.get(hang_round, np.nan))
            row["hang_lost_s"] = float(
                walls.get(hang_round, np.nan) - walls.drop(hang_round, errors="ignore").median()
            )
            if res["code"] != 0:
                row["hang_error"] = res.get("error", "")
    clean = pd.read_csv(base / "clean" / "rounds.csv")
    if metric == GLOBAL_RMSE:  # a peer method's RMSE is its silos' mean (no global model)
        metric = headline_rmse(clean.columns)
    row["clean_final"] = float(clean[metric].iloc[-1])
    cut = base / "kill"
    mark = cut / "killed_after.txt"
    if not mark.is_file():
        launch(spec, cut, "", kill_after=kill_after)
        mark.write_text(str(int(pd.read_csv(cut / "rounds.csv")["round"].max())))
    row["killed_after_round"] = int(mark.read_text())
    res = resume(method, cut, rounds)
    resumed = pd.read_csv(cut / "rounds.csv")
    row["resume_exit"] = res["code"]
    row["resumed_rounds"] = int(resumed["round"].max())
    row["resumed_final"] = float(resumed[metric].iloc[-1])
    row["metric"] = metric
    row["identical"] = bool(
        np.isclose(row["resumed_final"], row["clean_final"], rtol=0, atol=0)
        or (np.isnan(row["resumed_final"]) and np.isnan(row["clean_final"]))
    )
    return row


def check(cell: dict, where) -> None:
    """What a run of this study accepts (experiments/study.py)."""
    if not 1 <= cell["kill-after"] < cell["rounds"]:
        raise ValueError(f"{where}: grid.kill-after: a round before the last (1..rounds-1)")
    if not 1 <= cell["hang-round"] <= cell["rounds"]:
        raise ValueError(f"{where}: grid.hang-round: a round of the run (1..rounds)")
    from config import check_overrides
    from config.schema import ConfigError, parse_overrides

    for key in ("config", "faulty", "hang"):
        try:
            check_overrides(parse_overrides(cell[key]))
        except ConfigError as e:
            raise ValueError(f"{where}: grid.{key}: {e}") from None
    for key in ("faulty", "hang"):
        if "faults." not in cell[key]:
            raise ValueError(f"{where}: grid.{key}: a run config that sets faults.*")


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per method already: the table is the runs."""
    return runs


def markdown(table: pd.DataFrame) -> str:
    lines = [
        "| method | 20% faulty calls: injected / recorded / wrongly aggregated | rounds "
        "completed | hung silo: its round's wall (s), time lost (s) | killed after round, "
        "resumed to | final metric: uninterrupted / killed + resumed |",
        "|---|---|---|---|---|---|",
    ]
    for r in table.itertuples():
        hang = (
            f"{r.hang_round_s:.1f}, {r.hang_lost_s:+.1f}"
            if r.hang_exit == 0
            else f"run stops (exit {r.hang_exit}) naming the party"
        )
        lines.append(
            f"| {r.method} | {r.injected} / {r.recorded} / {r.wrongly_aggregated} | "
            f"{r.faults_rounds}/{r.rounds} | {hang} | {r.killed_after_round}, {r.resumed_rounds} | "
            f"{r.metric} {r.clean_final:.4g} / {r.resumed_final:.4g}"
            f"{' (identical)' if r.identical else ''} |"
        )
    return "\n".join(lines)


def plot(runs: pd.DataFrame, png, command: str) -> None:
    """Per method: the hung round's wall time beside the median of the others (a FedRL run
    stops instead, by design), and the faulty calls injected, recorded and wrongly aggregated."""
    fig, (hung, faults) = figures.subplots(1, 2, figsize=(11, 4))
    x, w = np.arange(len(runs)), 0.27
    others = runs["hang_round_s"] - runs["hang_lost_s"]
    hung.bar(x - w / 2, others, w, label="other rounds (median)")
    hung.bar(x + w / 2, runs["hang_round_s"], w, label="the hung silo's round")
    for i, r in enumerate(runs.itertuples()):
        if r.hang_exit != 0:
            hung.text(i, 0.5, "run stops,\nnaming the party", ha="center", fontsize=7)
    hung.set(ylabel="round wall time (s)", title="a silo hangs 120 s (round timeout 3600 s)")
    for i, (col, label) in enumerate((("injected", "injected"), ("recorded", "recorded"),
                                      ("wrongly_aggregated", "wrongly aggregated"))):  # fmt: skip
        faults.bar(x + (i - 1) * w, runs[col], w, label=label)
    faults.set(ylabel="training calls", title="20% of training calls raise")
    for ax in (hung, faults):
        ax.set_xticks(x, runs["method"], fontsize=8)
        ax.legend(fontsize=8)
    fig.tight_layout()
    figures.save(fig, png, command)
