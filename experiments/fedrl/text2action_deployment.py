"""FedRL on Text2Action under Flower's deployment engine, on loopback: the deploy/ scripts start a
SuperLink (+ Fleet gateway) and two SuperNodes (`--role alpha`, `--role beta`), `flwr run`
submits the app, and the round times are printed from rounds.csv.

    python -m experiments.fedrl.text2action_deployment [--rounds 2] [--words 20] [--out DIR]

Slow by nature: each message starts a ClientApp process (~6-11 s a round trip), and a round is
2 x act-steps + 3 messages; the evaluation round (every `--rounds`-th) costs two messages per
word of the longest text, so keep `--words` small.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from experiments.bench.loopback import ROOT, Federation, free_port, wait_listening


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--words", type=int, default=20)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "text2action"))
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    if args.rounds <= 0 or args.words < 5 or not Path(args.data).is_dir():
        print(
            "text2action_deployment: --rounds > 0, --words >= 5 and an existing --data",
            file=sys.stderr,
        )
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="t2a-deploy-"))
    out = Path(args.out).resolve() if args.out else tmp / "out"
    port, control = free_port(), free_port()
    fed, t0 = Federation(tmp), time.time()
    try:
        fed.start(
            "link",
            [
                str(ROOT / "deploy/superlink.sh"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--control-port",
                str(control),
            ],
        )
        wait_listening("127.0.0.1", port)
        wait_listening("127.0.0.1", control)
        for pid, role in ((0, "alpha"), (1, "beta")):
            fed.start(
                f"sn{pid}",
                [
                    str(ROOT / "deploy/supernode.sh"),
                    "--superlink",
                    f"127.0.0.1:{port}",
                    "--partition-id",
                    str(pid),
                    "--num-partitions",
                    "2",
                    "--role",
                    role,
                    "--port",
                    str(free_port()),
                ],
            )
        fed.connect("loop", f"127.0.0.1:{control}")
        rc = (
            f'method="fedrl" num-clients=2 num-server-rounds={args.rounds} '
            f'eval-every={args.rounds} out-dir="{out}" fedrl.domain="text2action" '
            f'fedrl.t2a-data="{Path(args.data).resolve()}" fedrl.t2a-words={args.words} '
            f"fedrl.envs=4 fedrl.act-steps=4 fedrl.updates=8 fedrl.warmup=16 "
            f"fedrl.batch-size=8"
        )
        started = fed.cli("run", str(ROOT), "loop", "--format", "json", "--run-config", rc)
        run_id = json.loads(started.stdout)["run-id"]
        status = fed.wait_finished("loop", run_id, 6 * 3600)
        print(f"status {status}, {time.time() - t0:.0f} s in all")
        import pandas as pd

        print(pd.read_csv(out / "rounds.csv")[["round", "wall_s", "messages"]].to_string())
        return 0
    finally:
        fed.close()


if __name__ == "__main__":
    sys.exit(main())
