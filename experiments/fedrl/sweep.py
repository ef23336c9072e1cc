"""SuccRate against one `fedrl.*` setting, one size: the paper's Figure 4 (the history H) and the
measurements behind our defaults (updates per round, exploration decay). The analysis of the
study files experiments/studies/fedrl_sweep_*.toml:

    python -m experiments.study experiments/studies/fedrl_sweep_history.toml   # Figure 4 at 8x8

The runs are Table 1's (experiments/fedrl/table1.py: same training, maps, model selection and
run cache); only the knob (`[report] knob`, varied by the study's arm) changes. Writes
experiments/results/<name>.csv (mean ± sd per value and method, best and last checkpoint) and
<name>.png. The paper draws Figure 4 without printing its values, so there are no paper numbers
to put beside ours; its text says success grows with H and converges past H = 16 at 8x8 and
16x16.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from experiments import figures
from experiments.simulate import RESULTS
from experiments.tables import redraw


def outputs(study: dict) -> list[Path]:
    """The sweep's CSV and figure; refuses (before anything trains) a study whose `[report]
    knob` is missing or is not the one run-config key its runs vary."""
    knob = study.get("report", {}).get("knob")
    varied = {k for a in study["grid"].get("arms", []) for v in a.get("run-config", []) for k in v}
    if not knob or {f"fedrl.{knob}"} != varied:
        raise ValueError(f"{study['file']}: report.knob = {knob!r}: the arms vary {sorted(varied)}")
    return [RESULTS / f"{study['name']}.csv", RESULTS / f"{study['name']}.png"]


def report(runs: pd.DataFrame, study: dict, command: str) -> str:
    """Mean ± sd per knob value, method and checkpoint (experiments/results/<name>.csv, with
    the settings every value shares and the command), and the figure."""
    knob = study["report"]["knob"]
    col = {"updates": "updates_per_round"}.get(knob, knob.replace("-", "_"))
    runs[knob] = runs[col]
    noise = np.where(runs.test_noise != "", " test_noise=" + runs.test_noise, "")
    runs["label"] = runs.method + noise
    g = runs.groupby(["label", knob, "checkpoint"]).succ_rate
    table = (
        (g.mean() * 100)
        .round(1)
        .to_frame("succ_mean")
        .join((g.std() * 100).round(1).rename("succ_sd"))
        .join(g.count().rename("seeds"))
        .reset_index()
    )
    grid = study["grid"]
    table.insert(0, "rules", grid["rules"][0])
    table.insert(1, "size", grid["sizes"][0])
    table.insert(2, "rounds", grid["rounds"])
    shared = grid.get("run-config", {})
    table.insert(3, "settings", " ".join(f"{k}={v}" for k, v in shared.items()))
    csv, png = outputs(study)
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.assign(command=command).to_csv(csv, index=False)
    draw(table, knob, png, command)
    return table.to_string(index=False)


def replot(study: dict) -> int:
    csv, png = outputs(study)
    knob = study["report"]["knob"]
    return redraw(csv, lambda t, c: draw(t, knob, png, c), keep_default_na=False)


# the paper's Table 1 row each curve is compared with (experiments/results/fedrl_table1.csv)
PAPER_ROW = {
    "dqn-alpha": "DQN-alpha",
    "dqn-full": "DQN-full",
    "fcn-alpha": "FCN-alpha",
    "fcn-full": "FCN-full",
    "fedrl test_noise=on": "FedRL test_noise=on",
}


def paper_succ(size: int, rules: str) -> dict[str, float]:
    """label -> the paper's SuccRate % at this size (FedRL: the first of its two numbers)."""
    t = pd.read_csv(RESULTS / "fedrl_table1.csv")
    t = t[(t.rules == rules) & (t.metric == "SuccRate %")].set_index("method")[
        f"{size}x{size} paper"
    ]
    return {
        label: float(str(t[row]).split("/")[0])
        for label, row in PAPER_ROW.items()
        if row in t.index and isinstance(t[row], str) and t[row].strip()
    }


def draw(table: pd.DataFrame, knob: str, png, command: str) -> None:
    """SuccRate against the knob, best and last checkpoint, each method's curve with the
    paper's Table 1 value for it as a dotted line of the same colour."""
    size, rules = int(table["size"].iloc[0]), str(table.rules.iloc[0])
    paper = paper_succ(size, rules)
    fig, axes = figures.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, ckpt in zip(axes, ("best", "last")):
        for label, t in table[table.checkpoint == ckpt].groupby("label"):
            line = ax.errorbar(
                t[knob], t.succ_mean, yerr=t.succ_sd, marker="o", capsize=3, label=f"{label} (ours)"
            )
            if label in paper:
                color = line.lines[0].get_color()
                ax.axhline(
                    paper[label],
                    color=color,
                    ls=":",
                    lw=1.2,
                    label=f"{label} paper {paper[label]:g}",
                )
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"fedrl.{knob}")
        ax.set_title(f"{size}x{size}, {rules} rules, {ckpt} checkpoint")
        ax.set_ylabel("SuccRate % (mean ± sd over seeds)")
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    figures.save(fig, png, command)
