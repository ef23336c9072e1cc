"""Reliability of every method in Flower's simulation engine, as an operator would try it.

For each method, four runs of the same small study (seed 0, ROUNDS rounds):
* clean: no faults (the reference);
* faults: 20% of training calls raise (`faults.fraction=0.2`, drawn per call);
* hang: silo / party 1 hangs 120 s in round 3 (`faults.hang-partitions`);
* kill: the launcher, its SuperLink, ServerApp and Ray workers get SIGKILL (a crash) once
  round KILL_AFTER is in rounds.csv, then `simulation.py M --resume DIR` finishes the run.

Columns: faulty calls injected (recomputed from clients/faults.fault_of for every call that was
sent) and recorded in clients.csv, updates wrongly aggregated (an injected call whose row says
ok, or rounds whose n_accepted differs from their ok rows: must be 0), rounds completed, the
time the hung silo cost (round 3's wall time minus the median of the others), and the final
metric of the clean run beside the killed-and-resumed one.

    python -m experiments.bench.reliability_table            # runs what is missing, prints the table
    python -m experiments.bench.reliability_table --markdown # the README table from the CSV
Work folder: runs/reliability (kept, so a rerun resumes); results:
experiments/results/reliability.csv.
"""

from __future__ import annotations

import argparse
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
from experiments.simulate import RESULTS, ROOT, command_line
from launch.superlink import processes_with_token
from strategies.floors import GLOBAL_RMSE, headline_rmse

ROUNDS, KILL_AFTER = 6, 2
WORK = ROOT / "runs" / "reliability"
DRIVING = (
    "driving.image-size=32 driving.train-per-silo=60 driving.test-per-silo=20 "
    "driving.local-epochs=1"
)
STUDIES = {  # method -> (flags, run config, the metric compared)
    "fedavg": (["--num-clients", "5"], DRIVING, "rmse"),
    "fedprox": (["--num-clients", "5"], DRIVING, "rmse"),
    "cdl-sfl": (["--num-clients", "5"], DRIVING, "rmse"),
    "gossip": (["--num-clients", "5"], DRIVING, "rmse"),
    "cdl": (["--num-clients", "5"], DRIVING, "rmse"),
    "fedrl": (
        [],
        "fedrl.warmup=32 fedrl.envs=8 fedrl.act-steps=2 fedrl.updates=3 "
        "fedrl.batch-size=8 fedrl.eval-episodes=6 fedrl.max-steps=6 "
        "fedrl.target-update=2 fedrl.retries=5",
        "valid-succ-rate-test_noise=off",
    ),
    "fedvln": (
        [],
        "fedvln.train-houses=3 fedvln.unseen-houses=2 fedvln.embedding=16 "
        "fedvln.hidden=32 fedvln.batch-size=8 fedvln.max-local-steps=2 fedvln.seen-rate=1.0 "
        'fedvln.optimizer-state="house"',
        "val_unseen_sr",
    ),
}
FAULTS = {
    "clean": "",
    "faults": "faults.fraction=0.2",
    "hang": 'faults.hang-partitions="1" faults.rounds="3" faults.hang-s=120.0 timeout-floor=5.0',
}


def launch(method: str, out: Path, extra: str, kill_after: int = 0) -> dict:
    """simulation.py into `out` (skipped when it already finished); returns exit code and
    wall time. With kill_after, SIGTERM once that many rounds are in rounds.csv."""
    if (out / "rounds.csv").is_file() and len(pd.read_csv(out / "rounds.csv")) >= ROUNDS:
        return {"code": 0, "wall_s": float("nan")}
    flags, cfg, _ = STUDIES[method]
    cmd = [
        sys.executable,
        str(ROOT / "simulation.py"),
        method,
        "--rounds",
        str(ROUNDS),
        "--seed",
        "0",
        "--out",
        str(out),
        "--no-plots",
        *flags,
        "--run-config",
        f"{cfg} {extra}".strip(),
    ]
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
        env={**os.environ, "FEDEMBODIED_RUN_TOKEN": token},
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
    return {
        "code": proc.returncode,
        "wall_s": time.perf_counter() - t0,
        "error": (err.strip().splitlines() or [""])[-1][:200],
    }


def resume(method: str, out: Path) -> dict:
    if len(pd.read_csv(out / "rounds.csv")) >= ROUNDS:
        return {"code": 0}
    cmd = [sys.executable, str(ROOT / "simulation.py"), method, "--resume", str(out), "--no-plots"]
    print("$", " ".join(cmd), flush=True)
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
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


def study(method: str) -> dict:
    _, _, metric = STUDIES[method]
    row: dict = {"method": method}
    base = WORK / method
    for name, extra in FAULTS.items():
        res = launch(method, base / name, extra)
        out = base / name
        rounds = pd.read_csv(out / "rounds.csv") if (out / "rounds.csv").is_file() else None
        row[f"{name}_exit"] = res["code"]
        row[f"{name}_rounds"] = 0 if rounds is None else int(rounds["round"].max())
        if name == "faults" and rounds is not None:
            row.update(fault_counts(method, out))
        if name == "hang" and rounds is not None:
            walls = rounds.set_index("round")["wall_s"]
            row["hang_round_s"] = float(walls.get(3, np.nan))
            row["hang_lost_s"] = float(
                walls.get(3, np.nan) - walls.drop(3, errors="ignore").median()
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
        launch(method, cut, "", kill_after=KILL_AFTER)
        mark.write_text(str(int(pd.read_csv(cut / "rounds.csv")["round"].max())))
    row["killed_after_round"] = int(mark.read_text())
    res = resume(method, cut)
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


def markdown(table: pd.DataFrame) -> str:
    lines = [
        "| method | 20% faulty calls: injected / recorded / wrongly aggregated | rounds "
        "completed | hung silo: round 3 wall (s), time lost (s) | killed after round, "
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
            f"{r.faults_rounds}/{ROUNDS} | {hang} | {r.killed_after_round}, {r.resumed_rounds} | "
            f"{r.metric} {r.clean_final:.4g} / {r.resumed_final:.4g}"
            f"{' (identical)' if r.identical else ''} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default=",".join(STUDIES))
    p.add_argument("--markdown", action="store_true", help="print the README table and exit")
    args = p.parse_args(argv)
    cmd = command_line(__file__, argv)
    path = RESULTS / "reliability.csv"
    if args.markdown:
        print(markdown(pd.read_csv(path)))
        return 0
    rows = [study(m) for m in args.methods.split(",")]
    table = pd.DataFrame(rows)
    table["command"] = cmd
    if path.is_file():
        old = pd.read_csv(path)
        table = pd.concat([old[~old.method.isin(table.method)], table])
    table.to_csv(path, index=False)
    print(markdown(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
