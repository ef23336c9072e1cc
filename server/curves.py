"""TensorBoard event files beside rounds.csv, written as each round ends, so that
`tensorboard --logdir runs` shows every run's curves live (the convention of RL and FL
research code), per client and per silo as well as per round.

Tags: `<stage>/<metric>` for the round's row (`train/rmse`, `preexplore/val_unseen_sr`),
`client <partition>/<metric>` for each client's training row (loss, fit time, bytes sent),
`silo <partition>/<metric>` for each silo's own evaluation (decentralized methods). The step is
the server round. Bookkeeping columns (round, wall time) are left out; wall time stays in the
CSV. A resumed run appends to the same folder: TensorBoard joins the files by step.
"""

from __future__ import annotations

import math
import weakref
from pathlib import Path

SKIP = {"round", "stage", "node", "partition", "status", "num_examples"}


def _scalars(row: dict) -> dict[str, float]:
    out = {}
    for k, v in row.items():
        if k in SKIP or isinstance(v, bool) or not isinstance(v, int | float):
            continue
        if math.isfinite(v):
            out[k] = float(v)
    return out


TRAINING = ("loss", "train", "consensus", "exploration", "cd_grad_ratio", "pb_entropy")


def _group(stage: str, metric: str) -> str:
    """TensorBoard's section of a rounds.csv column: a model's scores on held-out data under
    `eval` (`<stage> eval` in a run of several stages), what training itself reports and the
    round's bookkeeping under the stage (`train` for one-stage runs)."""
    from server.plots import is_bookkeeping, meaning_of

    if is_bookkeeping(metric) or any(t in metric for t in TRAINING) or not meaning_of(metric)[0]:
        return stage
    return "eval" if stage == "train" else f"{stage} eval"


class Curves:
    def __init__(self, out: Path):
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self.writer = SummaryWriter(log_dir=str(out))
        # its writer thread ends with the recorder (or the process), not at some later time
        weakref.finalize(self, self.writer.close)

    def round(self, row: dict, clients: list[dict], silos: list[dict]) -> None:
        """The round `row` ended: its metrics, and the rows of its clients and silos."""
        step = int(row["round"])
        stage = row.get("stage", "train")
        for k, v in _scalars(row).items():
            self.writer.add_scalar(f"{_group(stage, k)}/{k}", v, step)
        for kind, rows in (("client", clients), ("silo", silos)):
            for r in rows:
                if r.get("round") != step:
                    continue
                for k, v in _scalars(r).items():
                    self.writer.add_scalar(f"{kind} {r.get('partition')}/{k}", v, step)
        self.writer.flush()
