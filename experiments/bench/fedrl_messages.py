"""How many messages a FedRL run sends, counted on the protocol itself (issue 63 item 1).

    python -m experiments.study experiments/studies/fedrl_messages.toml

Runs Table 1's recipe (paper rules, the shipped defaults, study mode, seed 0) once per
`protocol` through the protocol's own `send`, counting every message per round: `chained`,
the shipped evaluation (the independent plays of an evaluation step together, one chain of 2
messages a step for all: `Protocol.play` in training/fedrl_protocol.py), and `one_by_one`,
every play in its own chain, as each play was sent before issue 63 (a chain of one play sends
exactly the messages a play sent then). The two runs must compute the same numbers (the
summary's `same_numbers`, also tests/test_fedrl.py), so the ratio is the messages saved,
nothing else. Deployed, each message is a ClientApp process and a chain of round trips
(docs/performance.md): the wall time of a deployed study scales with it.
Writes experiments/results/fedrl_messages{,_runs}.csv and fedrl_messages.png.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from experiments import figures
from experiments.fedrl.table1 import settings_of, split_of
from experiments.simulate import ROOT
from training.fedrl_protocol import DirectTransport, Protocol, Selection, checkpoints

PROTOCOLS = ("one_by_one", "chained")
KINDS = ("train", "evaluate", "last", "run")


class OneByOne(Protocol):
    """Every play of an evaluation in its own chain of messages (the protocol before issue 63)."""

    def evaluate(self, split, weights="last"):
        self.flush()
        out = {}
        for w in checkpoints(weights):
            for noise in (True, False):
                out.update(self.play([(split, w, noise)]))
        return out


def count(protocol: str, map_dir: str, size: int, rounds: int, eval_every: int, seed: int):
    """One run's rows, one per round: its kind (train | evaluate | last), the messages it sent
    and every number it computed (what `same_numbers` compares)."""
    import torch

    torch.set_num_threads(1)
    map_file = str(ROOT / map_dir / f"gridworld_o_{size}.mat")
    job = {"seed": seed, "size": size, "rules": "paper", "map_file": map_file, "extra": {}}
    job["ranges"] = split_of(map_file, {})
    s = settings_of(job)
    s.check_maps()
    run, sent = DirectTransport(s), [0]
    send = run.send

    def counted(*a, **k):
        sent[0] += 1
        return send(*a, **k)

    run.proto = {"one_by_one": OneByOne, "chained": Protocol}[protocol](s, counted)
    select, rows, t0 = Selection(s.select_key()), [], time.perf_counter()
    for rnd in range(1, rounds + 1):
        last, before = rnd == rounds, sent[0]
        evaluating = last or rnd % eval_every == 0
        row = run.proto.train_round(evaluating)
        if evaluating:
            row.update(select(run, rnd, last, bool(len(s.test))))
        kind = "last" if last else "evaluate" if evaluating else "train"
        rows.append({"protocol": protocol, "size": size, "round": rnd, "kind": kind,
                     "messages": sent[0] - before, **row})  # fmt: skip
    print(f"  {protocol}: {time.perf_counter() - t0:.0f} s", flush=True)
    return rows


def check(cell: dict, where) -> None:
    """What a run of this study accepts (experiments/study.py)."""
    if cell["protocol"] not in PROTOCOLS:
        raise ValueError(f"{where}: grid.protocol: {cell['protocol']!r} is not one of {PROTOCOLS}")
    if cell["size"] not in (8, 16, 32):
        raise ValueError(f"{where}: grid.size: 8, 16 or 32")
    if cell["rounds"] < 1 or cell["eval-every"] < 1:
        raise ValueError(f"{where}: grid.rounds and grid.eval-every must be >= 1")


def same_numbers(runs: pd.DataFrame) -> bool:
    """Both protocols computed the same numbers in every round (NaN equal to NaN)."""
    a, b = (
        runs[runs.protocol == p].drop(columns=["protocol", "messages"]).reset_index(drop=True)
        for p in PROTOCOLS
    )
    return bool(len(a) and a.equals(b))


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Messages a round of each kind, and in the whole run, one protocol beside the other."""
    if set(runs.protocol) != set(PROTOCOLS):
        raise ValueError(f"fedrl_messages: needs both protocols {PROTOCOLS}")
    same, rows = same_numbers(runs), []
    for kind in KINDS:
        pick = runs if kind == "run" else runs[runs.kind == kind]
        total = {p: int(pick[pick.protocol == p].messages.sum()) for p in PROTOCOLS}
        n = int((pick.protocol == "chained").sum())
        per = (lambda m: m) if kind == "run" else (lambda m: m // max(n, 1))
        rows.append({"rounds": kind, "count": n,
                     **{f"messages_{p}": per(total[p]) for p in PROTOCOLS},
                     "ratio": round(total["chained"] / total["one_by_one"], 3) if n else np.nan,
                     "same_numbers": same, "run_rounds": int(runs["round"].max())})  # fmt: skip
    return pd.DataFrame(rows)


def plot(runs: pd.DataFrame, png, command: str) -> None:
    """Messages a round of each kind (the run's total on its own axis), one bar per protocol."""
    table = summarize(runs)
    fig, axes = figures.subplots(1, 2, figsize=(9, 3.8), gridspec_kw={"width_ratios": [3, 1]})
    for ax, part in zip(axes, (table[table.rounds != "run"], table[table.rounds == "run"])):
        x = np.arange(len(part))
        for i, p in enumerate(PROTOCOLS):
            bars = ax.bar(x + (i - 0.5) * 0.4, part[f"messages_{p}"], 0.4,
                          label=p.replace("_", " "))  # fmt: skip
            ax.bar_label(bars, fontsize=8)
        ax.set_xticks(x, [f"{r} ({c})" for r, c in zip(part.rounds, part["count"])])
    axes[0].set(ylabel="messages a round", title="one round of each kind (rounds of that kind)")
    axes[1].set(ylabel="messages", title="the whole run")
    axes[0].legend(fontsize=8)
    size = int(runs["size"].iloc[0])
    fig.suptitle(f"FedRL {size}x{size}, {int(runs['round'].max())} rounds: same numbers both ways: "
                 f"{same_numbers(runs)}", fontsize=10)  # fmt: skip
    fig.tight_layout()
    figures.save(fig, png, command)
