"""What each speaker of a pipeline seed teaches (issue 41's instrument a constant cannot pass):
the federated follower's SR on the val routes when each route is instructed by a speaker,
beside its SR on the true instructions of the same routes.

BLEU cannot tell a grounded speaker from a template (a constant sentence scores like our first
speaker), and route fidelity scores words, not use. The follower that the augmentation stage
starts from (FedEnvdrop's `best.pt`) is the reader whose use of the words matters, so it is
the one asked. Speakers: the federated one (`speaker/best.pt`, kept by val_seen route
fidelity, and `model.pt`, the last), the centralized one (`central/checkpoints/speaker.pt` and
`speaker_last.pt`), and the floors a speaker must beat: the best train constant and another
path's true instruction in the same house (`training.vln_speaker_quality`). One route per
path (its first episode), greedy decoding, both val splits.

Written to OUT/seed<S>/teaching.csv (seed, speaker, checkpoint, split, taught_sr, true_sr,
taught_ratio), recomputed only when a checkpoint it read is newer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import torch

from config import parse
from models import vln_checkpoint
from training import vln_agent, vln_speaker
from training import vln_speaker_quality as quality
from training.vln_house import setup_of

# Table 4's row names, and each speaker's (checkpoint label, file) pairs under a seed's folder
SPEAKERS = {
    "Fed": (("best", "speaker/best.pt"), ("last", "speaker/model.pt")),
    "Cent": (
        ("best", "central/checkpoints/speaker.pt"),
        ("last", "central/checkpoints/speaker_last.pt"),
    ),
}


def teaching(out: Path, seed: int) -> pd.DataFrame | None:
    """This seed's teaching rows (cached in OUT/teaching.csv); None before the follower and the
    federated speaker exist."""
    follower_ck, config = out / "agent" / "best.pt", out / "speaker" / "config.json"
    if not follower_ck.is_file() or not (out / "speaker" / "best.pt").is_file():
        return None
    used = [follower_ck] + [out / f for pairs in SPEAKERS.values() for _, f in pairs]
    used = [f for f in used if f.is_file()]
    dest = out / "teaching.csv"
    if dest.is_file() and all(f.stat().st_mtime < dest.stat().st_mtime for f in used):
        kept = pd.read_csv(dest)
        have = {s for s in SPEAKERS if any((out / f).is_file() for _, f in SPEAKERS[s])}
        if have <= set(kept["speaker"]):
            return kept
    torch.set_num_threads(1)
    c = parse(json.loads(config.read_text()))
    setup = setup_of(c)
    follower, _, _ = vln_checkpoint.load(follower_ck)
    settings = vln_agent.AgentSettings.of(c)
    tokens = vln_agent.Tokens(setup.vocab, settings.max_words)
    inputs = vln_speaker.PathInputs(setup.world)
    constant = quality.best_constant(setup.split("train"), seed)
    rows = []
    for split in ("val_seen", "val_unseen"):
        paths, _ = quality.one_per_path(setup.split(split))

        def taught(hyps):
            return quality.teaching(follower, setup.world, paths, hyps, tokens, settings)

        true_sr = taught([p.instruction for p in paths])
        said = {("true instructions", ""): [p.instruction for p in paths]}
        said[("constant sentence (floor)", "")] = [constant] * len(paths)
        said[("other path's instruction (floor)", "")] = quality.other_path(paths)
        for name, pairs in SPEAKERS.items():
            for ck, file in pairs:
                if (out / file).is_file():
                    speaker, _, _ = vln_checkpoint.load(out / file)
                    said[(name, ck)] = vln_speaker.write_instructions(
                        speaker, inputs, paths, setup.vocab
                    )
        for (name, ck), hyps in said.items():
            sr = true_sr if name == "true instructions" else taught(hyps)
            rows.append(
                {
                    "seed": seed,
                    "speaker": name,
                    "checkpoint": ck,
                    "split": split,
                    "taught_sr": sr,
                    "true_sr": true_sr,
                    "taught_ratio": sr / true_sr if true_sr else float("nan"),
                }
            )
    df = quality.with_teaching_gain(pd.DataFrame(rows))
    df.to_csv(dest, index=False)
    return df
