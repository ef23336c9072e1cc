"""What every table script shares, so a script reads as "which runs, which table": mean ± sd
over runs, the paired interval of a difference, markdown pipe tables, the paper's values drawn
beside ours, and the refusal to overwrite a committed result.

Runs and seeds themselves live in experiments/simulate.py (`cached`, `in_parallel`,
`job_fingerprint`): a script lists its jobs, this module turns their rows into tables."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np


def mean_sd(values, digits: int = 1) -> str:
    """'mean ± sd' over runs (sample sd); one run prints its value alone, none prints ''."""
    v = np.asarray(values, float)
    if not len(v):
        return ""
    if len(v) == 1:
        return f"{v.mean():.{digits}f}"
    return f"{v.mean():.{digits}f} ± {v.std(ddof=1):.{digits}f}"


def paired_interval(a, b, level: float = 0.95, sd_floor: float = 0.0) -> tuple[float, float, float]:
    """Mean of the paired differences a - b (same seeds, same order) and its t-interval:
    (mean, low, high); the interval is nan with fewer than two pairs. A comparison whose
    interval holds 0 is within noise.

    `sd_floor`: the least standard deviation a difference can have, where each score carries a
    measurement noise known apart from the seeds (a success rate over n episodes: binomial).
    With 2 or 3 seeds the sample sd can come out near 0 by chance (two seeds whose scores move
    by the same 0.6 points), which would call a difference far below one evaluation's noise
    real. The floor is a known sd, so it takes the normal quantile (z); the seeds' own sd,
    estimated, takes t: the interval is the wider of the two."""
    from scipy import stats

    d = np.asarray(a, float) - np.asarray(b, float)
    n = len(d)
    if n < 2:
        return (float(d.mean()) if n else np.nan), np.nan, np.nan
    q = 0.5 + level / 2
    half = max(stats.t.ppf(q, n - 1) * d.std(ddof=1), stats.norm.ppf(q) * sd_floor) / np.sqrt(n)
    return float(d.mean()), float(d.mean() - half), float(d.mean() + half)


def gain_text(gain: float, low: float, high: float) -> str:
    """A paired difference as the tables print it: `+1.2 [-0.3, +2.7]`, the gain alone when
    there is no interval (one seed)."""
    return f"{gain:+.1f}" + ("" if low != low else f" [{low:+.1f}, {high:+.1f}]")


def epsilon_text(v: float) -> str:
    """A run's epsilon as the privacy tables print it: ∞ (no noise), 0 (nothing released), or
    three significant digits."""
    return "∞" if not math.isfinite(v) else ("0" if v == 0 else f"{v:.3g}")


def se_eval(sr: float, n: float) -> float:
    """Binomial standard error (SR points) of one evaluation on n episodes."""
    return float(np.sqrt(sr * (100 - sr) / n)) if n and n == n else float("nan")


def binomial_sd(sa: dict, sb: dict, seeds: list[int]) -> float:
    """The sd of one paired difference from evaluation noise alone: two independent success
    rates over their episodes (SR in %, n episodes; a side with no count takes the other's),
    averaged over the seeds. 0 when no count is known."""
    var = []
    for s in seeds:
        (pa, na), (pb, nb) = sa[s], sb[s]
        na, nb = (na if na == na else nb), (nb if nb == nb else na)
        if na == na and nb == nb and na > 0 and nb > 0:
            var.append(se_eval(pa, na) ** 2 + se_eval(pb, nb) ** 2)
    return float(np.sqrt(np.mean(var))) if var else 0.0


def paired(sa: dict, sb: dict) -> dict | None:
    """Two sides' {seed: (SR, episodes)} paired over the seeds both have: their means, the
    mean difference a − b with its interval (sd floored by `binomial_sd`), whether it is
    within noise, and the difference seed by seed; None when no seed is shared."""
    seeds = sorted(set(sa) & set(sb))
    if not seeds:
        return None
    x, y = [sa[s][0] for s in seeds], [sb[s][0] for s in seeds]
    mean, lo, hi = paired_interval(x, y, sd_floor=binomial_sd(sa, sb, seeds))
    return {
        "n_seeds": len(seeds),
        "a_sr": float(np.mean(x)),
        "b_sr": float(np.mean(y)),
        "gain": mean,
        "low": lo,
        "high": hi,
        "within_noise": bool(lo <= 0 <= hi) if lo == lo else True,
        "by_seed": " / ".join(f"{u - v:+.1f}" for u, v in zip(x, y)),
    }


def ratio_within_repeat(runs, value: str, baseline):
    """`runs` with a `ratio` column: each row's `value` over the baseline row's of the same
    `repeat` (`baseline`: a boolean mask of the baseline rows), so a change of load between
    repeats hits both sides of a ratio alike (a speed is a ratio to a baseline of the same run)."""
    base = runs[baseline].set_index("repeat")[value]
    return runs.assign(ratio=runs[value] / runs["repeat"].map(base))


def pipe_table(head: list[str], rows: list[list]) -> str:
    """A markdown table: one header row, then one row per list of cells."""
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def refuse_overwrite(paths: list[Path], force: bool) -> None:
    """A committed result is replaced only on --force (or written under another study `name`)."""
    there = [str(p) for p in paths if p.exists()]
    if there and not force:
        raise ValueError(
            f"{', '.join(there)} exist: pass --force to overwrite them, or give a copy of the "
            "study file another `name`"
        )


def study_files(results_dir, name: str) -> list[Path]:
    """A study's three outputs: the summary `<name>.csv`, one row per run `<name>_runs.csv`,
    and the figure `<name>.png`."""
    res = Path(results_dir)
    return [res / f"{name}.csv", res / f"{name}_runs.csv", res / f"{name}.png"]


def made_by(df, csv: Path) -> str:
    """The command that made a committed CSV (its `command` column), for a figure drawn again
    from it (`--plot-only`): the figure names the command that made its numbers, not the redraw."""
    cmds = sorted(set(df["command"].dropna())) if "command" in df else []
    if len(cmds) != 1:
        raise ValueError(f"{csv}: needs one `command` (the command that made it), found {cmds}")
    return cmds[0]


def plot_only_flag(parser) -> None:
    """A study script's `--plot-only`: its figure again from its committed CSVs (`redraw`)."""
    parser.add_argument(
        "--plot-only",
        action="store_true",
        help="draw the figure again from the committed CSVs, under the command that made them",
    )


def redraw(csv: Path, draw, **read) -> int:
    """`--plot-only`: `draw(df, command)` from a committed CSV and the command that made it;
    exit status 2 with one line naming the file when it is missing or has no command."""
    import pandas as pd

    try:
        if not Path(csv).is_file():
            raise ValueError(f"{csv}: no such file (run the study first)")
        df = pd.read_csv(csv, **read)
        draw(df, made_by(df, csv))
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


def redraw_study(files: list[Path], draw) -> int:
    """`--plot-only` for a `save_study` study: its figure from its committed runs CSV, under the
    command its summary records."""
    import pandas as pd

    def from_runs(table, command):
        draw(pd.read_csv(files[1]), files[2], command)

    return redraw(files[0], from_runs)


def print_from_runs(runs_csv: Path, tables) -> int:
    """`--plot-only` for a study that draws no figure: `tables(runs)`, its tables made again
    from the committed runs CSV, printed; nothing trains and nothing is written."""
    import sys

    import pandas as pd

    if not Path(runs_csv).is_file():
        print(f"study: {runs_csv}: no such file (run the study first)", file=sys.stderr)
        return 2
    print(tables(pd.read_csv(runs_csv)))
    return 0


def save_study(files: list[Path], runs, table, command: str, draw) -> None:
    """Write `study_files`: the runs, the summary with the command that made it, and the
    figure `draw(runs, png, command)` makes (`experiments.figures.save`)."""
    files[0].parent.mkdir(parents=True, exist_ok=True)
    runs.to_csv(files[1], index=False)
    table.assign(command=command).to_csv(files[0], index=False)
    draw(runs, files[2], command)
