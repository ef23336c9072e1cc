"""Engine parity: the same job, the same seed, in Flower's simulation engine and deployed on
loopback (TLS, node authentication, the edge), must write the same rounds.csv and clients.csv.

    python -m experiments.bench.parity [--methods fedavg cdl fedrl] [--rounds 3] [--work DIR]

Each method runs three times: simulated, deployed, and deployed with its SuperLink and one
SuperNode killed after round 1 and the run resumed.

What cannot be equal, and why: wall times and per-client seconds (`wall_s`, `fit_s`, every
`*_s` column: two engines, two clocks) and node ids (Flower draws them at random per node).
Everything else, every metric, byte count and status, must match; floats to 1e-6 relative
(the two engines may order float reductions differently; in practice they agree exactly).
tests/test_parity.py runs it for two methods.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.bench.loopback import rounds_done, wait_for
from experiments.bench.message_cost import JOBS, LoopbackFederation, deployed, simulated

UNEQUAL = ("node",)  # Flower's random node ids


def comparable(table: pd.DataFrame) -> pd.DataFrame:
    keep = [c for c in table.columns if c not in UNEQUAL and not c.endswith("_s")]
    return table[keep].reset_index(drop=True)


def differences(a: Path, b: Path) -> list[str]:
    """Where two run folders' rounds.csv and clients.csv differ (beyond times and node ids)."""
    out = []
    for name in ("rounds.csv", "clients.csv"):
        x, y = (comparable(pd.read_csv(f / name)) for f in (a, b))
        if list(x.columns) != list(y.columns) or len(x) != len(y):
            out.append(
                f"{name}: columns {list(x.columns)} / {list(y.columns)}, rows {len(x)} / {len(y)}"
            )
            continue
        for col in x.columns:
            u, v = x[col], y[col]
            if u.dtype.kind in "fc" and v.dtype.kind in "fc":
                same = np.allclose(u, v, rtol=1e-6, atol=0, equal_nan=True)
            else:
                same = u.astype(str).equals(v.astype(str))
            if not same:
                out.append(f"{name} column {col!r}: {u.tolist()} / {v.tolist()}")
    return out


def ledger_differences(folder: Path, out: Path) -> list[str]:
    """Where the server's privacy figures (rounds.csv `<role>-privacy-epsilon`, last round)
    differ from each FedRL party's own audit log (its last noised release's epsilon): issue 44's
    one ledger. `folder` holds the nodes' audit logs (anywhere below it), `out` the run's
    rounds.csv. Partition 0 is alpha, 1 beta."""
    from clients.audit import read

    rounds, bad = pd.read_csv(out / "rounds.csv"), []
    logs = sorted(folder.rglob("audit/partition-*.jsonl"))
    for part, role in ((0, "alpha"), (1, "beta")):
        spent = [
            r["epsilon"]
            for log in logs
            if log.name == f"partition-{part}.jsonl"
            for r in read(log)
            if r.get("status") == "sent"
            and any(a["name"].startswith("c-") for a in r.get("arrays", []))
        ]
        server = rounds[f"{role}-privacy-epsilon"].iloc[-1]
        if not spent:
            bad.append(f"{role}: no noised release in its audit log under {folder}")
        elif not np.isclose(server, spent[-1], rtol=1e-9):
            bad.append(f"{role}: server says epsilon {server}, its own log {spent[-1]}")
    return bad


def deployed_killed(method: str, rounds: int, work: Path) -> Path:
    """The same job deployed, its SuperLink and node 1 killed (SIGKILL, their whole process
    groups) once round 1 is in rounds.csv, both started again (the SuperLink on its database,
    the node with its key and state folder), and the run submitted again with `resume=true
    resume-round=K` (docs/reliability.md); returns its out-dir."""
    fed = LoopbackFederation(method, work / f"{method}-deploy-killed")
    try:
        fed.submit(rounds)
        wait_for(lambda: rounds_done(fed.out) >= 1, 900, every=0.5, what="round 1")
        fed.kill("link")
        fed.kill("sn1")
        done = rounds_done(fed.out)
        if done >= rounds:
            raise RuntimeError(f"{method}: the run ended before the kill; give it more rounds")
        fed.start_link("link#2")
        fed.start_node(1, "sn1#2")
        fed.finish(fed.submit(rounds, f"resume=true resume-round={done}"))
        return fed.out
    finally:
        fed.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", nargs="+", default=["fedavg", "cdl", "fedvln"], choices=list(JOBS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="", help="folder of the runs (default: a temporary one)")
    ap.add_argument("--no-kill", action="store_true", help="skip the killed-and-resumed run")
    a = ap.parse_args(argv)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="parity-"))
    bad = 0
    for method in a.methods:
        sim = simulated(method, a.rounds, work)
        runs = {"deployed": lambda: deployed(method, a.rounds, work) / "out"}
        if not a.no_kill:
            runs["deployed, killed and resumed"] = lambda: deployed_killed(method, a.rounds, work)
        for how, run in runs.items():
            diff = differences(sim, run())
            print(f"{method} {how}: {'the same run' if not diff else 'DIFFERENT'}", *diff,
                  sep="\n  ")  # fmt: skip
            bad += bool(diff)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
