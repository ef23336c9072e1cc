"""Plot round-by-round metrics of one or more runs.

    python -m experiments.plot DIR [DIR ...] [--out PLOTDIR]

Writes one PNG per metric column of rounds.csv, each run a line, so several runs overlay for
comparison; bookkeeping columns (wall time, bytes, counts of clients, messages, steps and
examples, FedRL's privacy ledger counters) are left out: they are in rounds.csv, not metrics of
the model. Each plot has a title, the metric's unit where it has one, and whole rounds on the
x axis. Default output: DIR/plots for one run, ./plots for several.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

NOT_METRICS = {
    "round",
    "stage",
    "wall_s",
    "bytes_up",
    "bytes_down",
    "eval_bytes_down",
    "n_clients",
    "n_accepted",
    "n_eval_silos",
    "messages",
    "env-steps",
    "updates",
    "train-samples",
    "train-episodes",
    "local_steps",
    "server_lr",
    "exploration",
    "best-round",
}
UNITS = {  # metric name ending -> unit on the y axis
    "rmse": "rad",
    "mae": "rad",
    "_sr": "%",
    "_osr": "%",
    "_spl": "%",
    "_ndtw": "%",
    "_sdtw": "%",
    "_cls": "%",
    "_ne": "m",
    "_tl": "m",
    "_bleu": "BLEU-4",
    "consensus_distance": "L2 between silo models",
}


def is_bookkeeping(column: str) -> bool:
    return (
        column in NOT_METRICS
        or column.endswith(("_n", "-releases"))
        or column.startswith(("bytes", "n_"))
    )


def unit_of(metric: str) -> str:
    base = metric.split("-test_noise")[0]
    if "succ-rate" in base:
        return "fraction of episodes"
    return next((u for end, u in UNITS.items() if base.endswith(end)), "")


def run_label(run_dir: Path) -> str:
    cfg_path = run_dir / "config.json"
    if cfg_path.is_file():
        cfg = json.loads(cfg_path.read_text())
        return f"{cfg.get('method', '?')} ({run_dir.name})"
    return run_dir.name


def load_rounds(run_dir: Path) -> pd.DataFrame:
    path = Path(run_dir) / "rounds.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (is {run_dir} a run folder?)")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a readable CSV ({e})") from None
    if "round" not in df.columns:
        raise ValueError(f"{path}: no 'round' column")
    return df


def plot_runs(run_dirs: list[Path], out_dir: Path) -> list[Path]:
    runs = [(run_label(Path(d)), load_rounds(Path(d))) for d in run_dirs]
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = []
    for _, df in runs:
        metrics += [
            c
            for c in df.columns
            if not is_bookkeeping(c) and c not in metrics and pd.api.types.is_numeric_dtype(df[c])
        ]
    written = []
    for metric in metrics:
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, df in runs:
            if metric in df.columns:
                for stage, part in df.groupby("stage", sort=False) if "stage" in df else [("", df)]:
                    name = (
                        label
                        if df.get("stage", pd.Series([""])).nunique() <= 1
                        else f"{label} {stage}"
                    )
                    ax.plot(part["round"], part[metric], marker="o", ms=3, label=name)
        unit = unit_of(metric)
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(f"{metric} ({unit})" if unit else metric)
        ax.set_title(f"{metric} per round", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / f"{metric}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


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
    print(f"wrote {len(written)} plots to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
