"""FedRL and its baselines in one process, without Flower.

    python -m experiments.fedrl.local --method fedrl --rounds 200 --run-config "fedrl.size=8"

FedRL runs the very orchestrator of the Flower app (training/fedrl_protocol.py) with direct
calls to the same party code; the baselines and floors are training/fedrl_baselines.py.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from config import parse
from config.schema import merged, parse_overrides
from experiments.fedrl import STUDY
from training.fedrl_baselines import METHODS, train
from training.fedrl_setup import Settings


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--method", choices=METHODS, default="fedrl")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument(
        "--eval-every", type=int, default=20, help="valid every k rounds (model selection)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run-config", default="", help='fedrl.* overrides, e.g. "fedrl.size=16"')
    args = ap.parse_args(argv)
    if args.rounds <= 0 or args.eval_every <= 0:
        print("--rounds and --eval-every must be positive", file=sys.stderr)
        return 2
    try:
        cfg = {**STUDY, **parse_overrides(args.run_config), "seed": args.seed}
        s = Settings.of(parse(merged(cfg)))
        s.check_maps()
    except Exception as e:  # one line naming the key
        print(f"--run-config: {e}", file=sys.stderr)
        return 2
    print(json.dumps(s.map_report()))
    torch.set_num_threads(1)
    rows = train(args.method, s, args.rounds, args.eval_every)
    print(json.dumps({k: v for k, v in rows[-1].items() if "-" in k or k == "wall_s"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
