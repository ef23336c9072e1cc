"""A real FedRL Table-1 run deployed on loopback, timed as users run it (issue 63 item 5).

    python -m experiments.study experiments/studies/fedrl_deployed.toml --jobs 1   # ~1.1 h

The 8x8 Table-1 job (the paper's maps and rules, the shipped defaults, seed 0, valid every 10
rounds; study mode, so that every engine releases the same noise) run twice on this machine,
one after the other: in Flower's simulation engine (`simulation.py`, Ray), and deployed through
deploy/ on loopback as an operator runs it (experiments/bench/message_cost.LoopbackFederation:
TLS, node authentication, the edge and the gateway, two registered SuperNodes, alpha and beta,
with deploy/supernode.sh's defaults, then `flwr run` from the operator's CLI). Table 1's own run
of the same seed (experiments/results/fedrl_table1_runs.csv, one process) stands beside them:
the three compute the same numbers (tests/fedrl_parity.py), so the test SuccRates must match.

The study file gives the job (map folder, size, rounds, seed, evaluation interval); the one call
of `measure` writes per engine the run's wall time (submit to finished), its messages (every
reply in the nodes' audit logs), seconds a message, and the test SuccRate at the last and the
best checkpoint, test_noise on and off, and `same_succ_rates` (must be True: the runner exits 1
when it is not, after writing the results). Run it alone: its
figures are times. A finished engine's run in the work folder is reused; an unfinished deployed
one is refused (remove it). Results: experiments/results/fedrl_deployed{,_runs}.csv and .png.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import numpy as np
import pandas as pd

from experiments import figures
from experiments.bench.loopback import PYTHON, ROOT, unwind_on_sigterm, wait_for
from experiments.bench.message_cost import (
    POLICY,
    VARIANTS,
    LoopbackFederation,
    sent_replies,
)
from experiments.fedrl.table1 import settings_of, split_of
from experiments.simulate import RESULTS, run_child

SCORES = [
    f"{pre}test-succ-rate-test_noise={noise}" for pre in ("", "best-") for noise in ("on", "off")
]


def job_config(map_dir: str, size: int, eval_every: int, seed: int) -> str:
    """The run config of Table 1's job (experiments/fedrl/table1.settings_of), as a string."""
    map_file = str((ROOT / map_dir / f"gridworld_o_{size}.mat").resolve())
    ranges = split_of(map_file, {})
    keys = {
        "fedrl.reproducible-noise": "true",
        "fedrl.size": size,
        "fedrl.rules": '"paper"',
        "fedrl.map-file": f'"{map_file}"',
        **{f"fedrl.{k}-maps": f'"{v}"' for k, v in ranges.items()},
        "eval-every": eval_every,
        "seed": seed,
    }
    job = {"seed": seed, "size": size, "rules": "paper", "map_file": map_file, "extra": {}}
    settings_of({**job, "ranges": ranges}).check_maps()  # a bad map file: refused here
    return " ".join(f"{k}={v}" for k, v in keys.items())


def simulated(rc: str, rounds: int, work: Path) -> tuple[Path, float]:
    out = work / "simulation"
    if (out / "rounds.csv").is_file() and len(pd.read_csv(out / "rounds.csv")) == rounds:
        return out, float((out / "wall_s").read_text())
    t0 = time.perf_counter()
    run_child(
        [PYTHON, str(ROOT / "simulation.py"), "fedrl", "--rounds", str(rounds), "--out",
         str(out), "--no-plots", "--num-clients", "2", "--run-config", rc, "--policy",
         POLICY["fedrl"]],
        check=True,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    (out / "wall_s").write_text(f"{wall:.1f}")
    return out, wall


class Table1Federation(LoopbackFederation):
    """The loopback federation, submitting Table 1's job instead of the benchmark's small one."""

    def submit_job(self, rc: str, rounds: int) -> int:
        import json

        full = f'method="fedrl" num-clients=2 num-server-rounds={rounds} out-dir="{self.out}" {rc}'
        started = self.cli("run", str(ROOT), "op", "--format", "json", "--run-config", full)
        return json.loads(started.stdout)["run-id"]


def deployed(rc: str, rounds: int, work: Path) -> tuple[Path, float]:
    tmp = work / "deployment"
    done = tmp / "out" / "rounds.csv"
    if done.is_file() and len(pd.read_csv(done)) == rounds:
        return tmp, float((tmp / "wall_s").read_text())
    if tmp.exists():
        raise SystemExit(f"fedrl_deployed: {tmp} holds an unfinished deployed run; remove it")
    fed = Table1Federation("fedrl", tmp, VARIANTS["warm"])
    try:
        t0 = time.perf_counter()
        run_id = fed.submit_job(rc, rounds)
        wait_for(lambda: fed.status("op", run_id).startswith("finished"), 6 * 3600, every=30,
                 what="the deployed run")  # fmt: skip
        wall = time.perf_counter() - t0
        status = fed.status("op", run_id)
        if status != "finished:completed":
            raise RuntimeError(f"fedrl deployed: {status}; logs in {tmp}")
        (tmp / "wall_s").write_text(f"{wall:.1f}")
        return tmp, wall
    finally:
        fed.close()


DEPLOYED = "deployment (loopback, TLS, node auth, edge)"


def row(engine: str, rounds_csv: Path, audit_root: Path | None, wall: float) -> dict:
    last = pd.read_csv(rounds_csv).iloc[-1]
    messages = len(sent_replies(audit_root)) if audit_root is not None else None
    return {
        "engine": engine,
        "wall_s": round(wall, 1),
        "wall_h": round(wall / 3600, 2),
        "messages": messages,
        "message_s": round(wall / messages, 3) if messages else None,
        **{k: float(last[k]) for k in SCORES},
    }


def table1_row(size: int, seed: int, rounds: int) -> dict | None:
    """Table 1's own run of the same job (one process), from its committed per-run CSV; None
    where Table 1 has no such run."""
    runs = pd.read_csv(RESULTS / "fedrl_table1_runs.csv")
    mine = runs[
        (runs.method == "fedrl") & (runs.rules == "paper") & (runs["size"] == size)
        & (runs.seed == seed) & (runs.rounds == rounds)
    ]  # fmt: skip
    if mine.empty:
        return None
    out = {"engine": "one process (Table 1)", "wall_s": float(mine.wall_s.iloc[0])}
    for _, r in mine.iterrows():
        pre = "best-" if r.checkpoint == "best" else ""
        out[f"{pre}test-succ-rate-test_noise={r.test_noise}"] = float(r.succ_rate)
    return out


def measure(map_dir: str, size: int, rounds: int, eval_every: int, seed: int, work) -> list:
    """The job simulated, then deployed (one after the other), and Table 1's own run beside."""
    unwind_on_sigterm()  # a stopped study closes the federation it started
    rc = job_config(map_dir, size, eval_every, seed)
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    sim, sim_wall = simulated(rc, rounds, work)
    print(f"simulation: {sim_wall:.0f} s", flush=True)
    dep, dep_wall = deployed(rc, rounds, work)
    print(f"deployment: {dep_wall:.0f} s", flush=True)
    rows = [row("simulation", sim / "rounds.csv", sim, sim_wall),
            row(DEPLOYED, dep / "out" / "rounds.csv", dep, dep_wall),
            table1_row(size, seed, rounds)]  # fmt: skip
    return [r for r in rows if r is not None]


def check(cell: dict, where) -> None:
    """What a run of this study accepts (experiments/study.py)."""
    if cell["size"] not in (8, 16, 32):
        raise ValueError(f"{where}: grid.size: 8, 16 or 32")
    if min(cell["rounds"], cell["eval-every"]) < 1:
        raise ValueError(f"{where}: grid.rounds and grid.eval-every must be >= 1")
    if not (ROOT / cell["map-dir"] / f"gridworld_o_{cell['size']}.mat").is_file():
        raise ValueError(f"{where}: grid.map-dir: no gridworld_o_{cell['size']}.mat in it")


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs, and whether every engine gave the same test SuccRates (they must)."""
    return runs.assign(same_succ_rates=bool(runs[SCORES].nunique().max() == 1))


def failure(table: pd.DataFrame) -> str | None:
    """The study's claim, checked on the written table: every engine gave the same SuccRates."""
    if not table["same_succ_rates"].all():
        return "the engines gave different test SuccRates (same_succ_rates is False)"
    return None


def references(command: str) -> tuple[float | None, dict[str, float]]:
    """What the SuccRates are read against: the random policy's test SuccRate (random α and
    β) on the same maps, rules, size and seed (Table 1's own run, fedrl_table1_runs.csv; None
    where it has none), and the paper's FedRL-1 (test noise on) and FedRL-2 (off) at the size.
    The size and seed are the study file's that `command` ran."""
    from config.papers import FEDRL_TABLE1, FEDRL_TABLE1_SIZES
    from experiments.study import load

    study = next(w for w in shlex.split(command) if w.endswith(".toml"))
    grid = load(ROOT / study)["grid"]
    runs = pd.read_csv(RESULTS / "fedrl_table1_runs.csv")
    floor = runs[
        (runs.method == "random-both") & (runs.rules == "paper") & (runs["size"] == grid["size"])
        & (runs.seed == grid["seed"]) & (runs.checkpoint == "best") & (runs.split == "test")
    ]["succ_rate"]  # fmt: skip
    k = FEDRL_TABLE1_SIZES.index(grid["size"])
    paper = {
        n: FEDRL_TABLE1[(v, "succ")][k] / 100 for n, v in (("on", "fedrl-1"), ("off", "fedrl-2"))
    }
    return (float(floor.mean()) if len(floor) else None), paper


def plot(runs: pd.DataFrame, png, command: str) -> None:
    """Wall time of the run per engine, and the test SuccRates each gave, against the random
    policy and the paper's (`references`)."""
    fig, (wall, succ) = figures.subplots(1, 2, figsize=(11, 4))
    hours = runs["wall_s"] / 3600
    bars = wall.bar(range(len(runs)), hours, color=[f"C{k}" for k in range(len(runs))])
    wall.bar_label(bars, [f"{h:.2f} h" for h in hours], fontsize=8)
    wall.axhline(1.5, color="grey", ls="--", lw=0.8, label="issue 63's goal (1.5 h)")
    wall.set_xticks(range(len(runs)), [e.split(" (")[0] for e in runs["engine"]], fontsize=8)
    wall.set(ylabel="wall time of the run (h)", title="FedRL Table-1 job, deployed and not")
    wall.legend(fontsize=8)
    x, w = np.arange(len(SCORES)), 0.8 / len(runs)
    for k, (_, r) in enumerate(runs.iterrows()):
        succ.bar(x + (k - (len(runs) - 1) / 2) * w, r[SCORES].astype(float), w, label=r.engine,
                 color=f"C{k}")  # fmt: skip
    floor, paper = references(command)
    if floor is not None:
        succ.axhline(floor, color="black", ls="-.", lw=0.8,
                     label=f"random α and β, same maps and seed (floor) {floor:.2f}")  # fmt: skip
    for k, score in enumerate(SCORES):
        noise = score.rsplit("=", 1)[1]
        succ.hlines(paper[noise], k - 0.45, k + 0.45, color="grey", ls="--", lw=1,
                    label=f"paper FedRL-1 / -2 (noise on / off) {paper['on']:.3f} / "
                    f"{paper['off']:.3f}" if k == 0 else None)  # fmt: skip
    ticks = [s.replace("test-succ-rate-test_noise=", "noise ") for s in SCORES]
    succ.set_xticks(x, ticks, fontsize=8)
    succ.set(ylim=(0, 1.3), yticks=np.linspace(0, 1, 6), ylabel="test SuccRate",
             title="the same numbers in every engine")  # fmt: skip
    succ.legend(fontsize=7, loc="upper center")  # above the bars
    fig.tight_layout()
    figures.save(fig, png, command)
