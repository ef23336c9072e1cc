"""Plot round-by-round metrics of one or more runs (server/plots.py draws them).

    python -m experiments.plot DIR [DIR ...] [--out PLOTDIR]

Writes summary.png and one PNG per metric column of rounds.csv, each run a line, so several
runs overlay for comparison. Runs whose configs differ (another data folder, test split, number
of silos...) are not measured on the same thing: the command says so, key by key, and the
figures carry the same note. Default output: DIR/plots for one run, ./plots for several.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from server.plots import config_differences, plot_runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.plot", description=__doc__)
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    out = args.out or (args.runs[0] / "plots" if len(args.runs) == 1 else Path("plots"))
    try:
        written = plot_runs(args.runs, out)
    except (FileNotFoundError, ValueError) as e:
        print(f"experiments.plot: error: {e}", file=sys.stderr)
        return 2
    differ = config_differences(args.runs) if len(args.runs) > 1 else []
    if differ:
        print(
            "experiments.plot: warning: the runs' configs differ, so their curves may not "
            "measure the same thing:\n  " + "\n  ".join(differ),
            file=sys.stderr,
        )
    print(f"wrote {len(written)} plots to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
