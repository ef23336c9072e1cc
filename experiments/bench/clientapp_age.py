"""How long a deployed message's ClientApp process takes to reach our handler (issue 63).

    python -m experiments.bench.clientapp_age [--method fedrl] [--rounds 2]

Runs experiments/bench/message_cost's small job deployed on loopback (TLS, node auth, the edge;
deploy/supernode.sh's defaults: quick polls, warm start) in a new temporary folder and prints
the ClientApp's age when our handler started (`process_age_s` in the nodes' audit logs: the
fork, Flower pulling the task and its objects, installing the FAB and importing our app).
Prints only; the figures it gave are quoted in docs/performance.md with their date.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from experiments.bench.message_cost import JOBS, audit_costs, deployed, sent_replies


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--method", default="fedrl", choices=list(JOBS))
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args(argv)
    run = deployed(a.method, a.rounds, Path(tempfile.mkdtemp(prefix="clientapp-age-")), "warm")
    ages = audit_costs(sent_replies(run))["process_age_s"].to_numpy(dtype=float)
    print(
        f"{a.method}: {len(ages)} messages; ClientApp age at our handler: median "
        f"{np.median(ages):.3f} s, mean {ages.mean():.3f} s, under 1 s {(ages < 1).mean():.0%}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
