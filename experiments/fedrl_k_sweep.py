"""FedRL success rate vs K, the number of minibatch updates per exchange (the cost of staleness).

    python -m experiments.fedrl_k_sweep [--ks 4 16 64 256] [--seeds 0] [--transitions 38400]

With K updates per round, beta's Q outputs for all K minibatches are computed before alpha's K
updates, and theta_g crosses once per round, so larger K means staler C_beta and fewer
exchanges. To change only that, every K sees the same data and the same number of updates:
B = 32 environments, S = K/4 acting steps per round (so 8 transitions per update, as the app's
default K=16, S=4), and as many rounds as give `--transitions` transitions. Scored on 800 valid
maps (8x8, generated) with test_noise=on and off. Runs in one process (same party code as the
Flower app). Writes experiments/results/fedrl_k_sweep.csv and .png.
"""
from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.simulate import RESULTS, command_line  # noqa: E402


def one(job):
    k, seed, transitions, size = job
    import torch

    from clients.fedrl_party import Settings
    from experiments.fedrl_local import train
    from server.config import merged

    torch.set_num_threads(1)
    steps = max(1, k // 4)
    rounds = max(1, transitions // (32 * steps))
    s = Settings.from_config(merged({"seed": seed, "fedrl.size": size, "fedrl.envs": 32,
                                     "fedrl.act-steps": steps, "fedrl.updates": k}))
    last = train("fedrl", s, rounds, log=None)[-1]
    row = {"K": k, "S": steps, "rounds": rounds, "seed": seed, "size": size,
           "exchanges": rounds, "wall_s": last["wall_s"],
           **{f"succ_noise_{t}": last[f"valid-succ-rate-test_noise={t}"] for t in ("on", "off")},
           **{f"reward_noise_{t}": last[f"valid-avg-reward-test_noise={t}"] for t in ("on", "off")}}
    print(row, flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[4, 16, 64, 256])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--transitions", type=int, default=38400)
    ap.add_argument("--size", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    jobs = [(k, seed, args.transitions, args.size) for k in args.ks for seed in args.seeds]
    with ProcessPoolExecutor(args.jobs) as pool:
        df = pd.DataFrame(list(pool.map(one, jobs)))
    RESULTS.mkdir(parents=True, exist_ok=True)
    df.to_csv(RESULTS / "fedrl_k_sweep.csv", index=False)
    g = df.groupby("K")[["succ_noise_on", "succ_noise_off"]].agg(["mean", "std"])
    print(f"\n{command_line()}\n{g.round(3).to_string()}")
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for t in ("on", "off"):
        m = df.groupby("K")[f"succ_noise_{t}"]
        ax.errorbar(m.mean().index, 100 * m.mean(), yerr=100 * m.std().fillna(0), marker="o",
                    capsize=3, label=f"test_noise={t}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("K (updates per exchange)")
    ax.set_ylabel("valid SuccRate (%)")
    ax.set_title(f"FedRL {args.size}x{args.size}: same data and updates, staler C_beta with K")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "fedrl_k_sweep.png", dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
