"""What a federated speaker said for every val path: `said.csv` beside its rounds.csv.

Why: the speaker stage's fidelity columns are scores; a reader (and an independent parser, issue
64) needs the sentences themselves. The server never sees a house's paths, so the run cannot
write them: whoever holds every house's data writes them from the run's checkpoints, the
simulation launcher after a `--stage speaker` run (simulation.py) and the FedVLN pipeline
(experiments/fedvln/pipeline.py). Rows: split, path id, house, instruction, checkpoint (`best`:
best.pt, the best pooled val_seen fidelity; `last`: model.pt).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from config import parse
from models import vln_checkpoint
from training import vln_speaker
from training import vln_speaker_quality as quality
from training.vln_house import setup_of


def write_said(run: Path) -> Path | None:
    """said.csv in `run` from its checkpoints (kept if already there); None when `run` has
    no config.json or no checkpoint."""
    dest = run / "said.csv"
    if dest.is_file():
        return dest
    if not (run / "config.json").is_file():
        return None
    c = parse(json.loads((run / "config.json").read_text()))
    setup = setup_of(c)
    inputs, rows = vln_speaker.PathInputs(setup.world), []
    for ck, file in (("best", "best.pt"), ("last", "model.pt")):
        if not (run / file).is_file():
            continue
        speaker, _, _ = vln_checkpoint.load(run / file)
        for split in ("val_seen", "val_unseen"):
            paths, _ = quality.one_per_path(setup.split(split))
            hyps = vln_speaker.write_instructions(speaker, inputs, paths, setup.vocab)
            rows += quality.said_rows(split, paths, hyps, ck)
    if not rows:
        return None
    pd.DataFrame(rows).to_csv(dest, index=False)
    return dest
