"""A real FedRL Table-1 run deployed on loopback, timed as users run it (issue 63 item 5).

    python -m experiments.bench.fedrl_deployed --map-dir ../shared/data/gridworld
           [--rounds 200] [--work runs/fedrl_deployed] [--force]

The 8x8 Table-1 job (the paper's maps and rules, the shipped defaults, seed 0, valid every 10
rounds; study mode, so that every engine releases the same noise) run twice on this machine,
one after the other: in Flower's simulation engine (`simulation.py`, Ray), and deployed through
deploy/ on loopback as an operator runs it (experiments/bench/message_cost.LoopbackFederation:
TLS, node authentication, the edge and the gateway, two registered SuperNodes, alpha and beta,
with deploy/supernode.sh's defaults, then `flwr run` from the operator's CLI). Table 1's own run
of the same seed (experiments/results/fedrl_table1_runs.csv, one process) stands beside them:
the three compute the same numbers (tests/fedrl_parity.py), so the test SuccRates must match.

Writes experiments/results/fedrl_deployed.csv: per engine, the run's wall time (submit to
finished), its messages (every reply in the nodes' audit logs), seconds a message, and the test
SuccRate at the last and the best checkpoint, test_noise on and off. A finished engine's run in
--work is reused; an unfinished deployed one is refused (remove it).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

from experiments.bench.loopback import PYTHON, ROOT, unwind_on_sigterm, wait_for
from experiments.bench.message_cost import (
    POLICY,
    VARIANTS,
    LoopbackFederation,
    sent_replies,
)
from experiments.fedrl.table1 import settings_of, splits_for
from experiments.simulate import RESULTS, command_line
from experiments.tables import refuse_overwrite

SIZE, SEED, EVAL_EVERY = 8, 0, 10  # Table 1's 8x8 job, its first seed
SCORES = [
    f"{pre}test-succ-rate-test_noise={noise}" for pre in ("", "best-") for noise in ("on", "off")
]


def job_config(map_dir: str, rounds: int) -> str:
    """The run config of Table 1's job (experiments/fedrl/table1.settings_of), as a string."""
    map_file = str((Path(map_dir) / f"gridworld_o_{SIZE}.mat").resolve())
    ranges = splits_for(map_file, argparse.Namespace(train_maps="", valid_maps="", test_maps=""))
    keys = {
        "fedrl.reproducible-noise": "true",
        "fedrl.size": SIZE,
        "fedrl.rules": '"paper"',
        "fedrl.map-file": f'"{map_file}"',
        **{f"fedrl.{k}-maps": f'"{v}"' for k, v in ranges.items()},
        "eval-every": EVAL_EVERY,
        "seed": SEED,
    }
    job = {"seed": SEED, "size": SIZE, "rules": "paper", "map_file": map_file, "extra": {}}
    settings_of({**job, "ranges": ranges}).check_maps()  # a bad map file: refused here
    return " ".join(f"{k}={v}" for k, v in keys.items())


def simulated(rc: str, rounds: int, work: Path) -> tuple[Path, float]:
    out = work / "simulation"
    if (out / "rounds.csv").is_file() and len(pd.read_csv(out / "rounds.csv")) == rounds:
        return out, float((out / "wall_s").read_text())
    import subprocess

    t0 = time.perf_counter()
    subprocess.run(
        [PYTHON, str(ROOT / "simulation.py"), "fedrl", "--rounds", str(rounds), "--out",
         str(out), "--no-plots", "--num-clients", "2", "--run-config", rc, "--policy",
         POLICY["fedrl"]],
        cwd=ROOT, check=True,
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


def table1_row(rounds: int) -> dict:
    """Table 1's own run of the same job (one process), from its committed per-run CSV."""
    runs = pd.read_csv(RESULTS / "fedrl_table1_runs.csv")
    mine = runs[
        (runs.method == "fedrl") & (runs.rules == "paper") & (runs["size"] == SIZE)
        & (runs.seed == SEED) & (runs.rounds == rounds)
    ]  # fmt: skip
    out = {"engine": "one process (Table 1)", "wall_s": float(mine.wall_s.iloc[0])}
    for _, r in mine.iterrows():
        pre = "best-" if r.checkpoint == "best" else ""
        out[f"{pre}test-succ-rate-test_noise={r.test_noise}"] = float(r.succ_rate)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--map-dir", required=True, help="folder of gridworld_o_8.mat")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--work", default=str(ROOT / "runs" / "fedrl_deployed"))
    ap.add_argument("--force", action="store_true", help="overwrite the result file")
    a = ap.parse_args(argv)
    unwind_on_sigterm()
    if a.rounds < 1:
        ap.error("--rounds must be >= 1")
    out = RESULTS / "fedrl_deployed.csv"
    refuse_overwrite([out], a.force)
    rc = job_config(a.map_dir, a.rounds)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    sim, sim_wall = simulated(rc, a.rounds, work)
    print(f"simulation: {sim_wall:.0f} s")
    dep, dep_wall = deployed(rc, a.rounds, work)
    print(f"deployment: {dep_wall:.0f} s")
    rows = [
        row("simulation", sim / "rounds.csv", sim, sim_wall),
        row(
            "deployment (loopback, TLS, node auth, edge)", dep / "out" / "rounds.csv", dep, dep_wall
        ),
    ]
    if a.rounds == 200:
        rows.append(table1_row(a.rounds))
    table = pd.DataFrame(rows)
    table["command"] = command_line(__file__, argv)
    table.to_csv(out, index=False)
    print(table.drop(columns="command").to_string(index=False))
    same = table[SCORES].nunique().max() == 1
    print("the same test SuccRates in every engine" if same else "ENGINES DISAGREE")
    print(f"wrote {out}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
