"""What augmentation actually teaches from: the route fidelity of the federated speaker's
instructions as back-translation writes them, through the follower's environmental-dropout
mask (issue 41).

Route fidelity (`training.vln_speaker_quality.fidelity`) scores a speaker's greedy words on the
clean features. In the augment stage a house writes each route's instruction through the very
dropout mask the follower then trains with (Envdrop's back-translation, `training.vln_agent.
BackTranslation`), so the words the follower learns from can be worse than the fidelity
table says. This scores both on the val_seen paths (seen houses, as augmentation), one route
per path, for each pipeline seed's federated speaker (`speaker/best.pt`) and the agent the
augment stage starts from (`agent/best.pt`, whose mask it is). The mask is random: `--draws`
masks per seed, mean reported.

    python -m experiments.fedvln.backtranslation [--seeds 0 1 2] [--draws 3]

Written: experiments/results/fedvln_backtranslation.csv.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import torch

from config import parse
from experiments.simulate import RESULTS, ROOT
from models import vln_checkpoint
from training import vln_agent, vln_speaker
from training import vln_speaker_quality as quality
from training.vln_house import setup_of

PARTS = ("fidelity", "rooms_on_route", "goal_room", "stop_object")


def scores(out: Path, seed: int, draws: int) -> list[dict]:
    """Fidelity parts of the speaker's words without a mask and under `draws` follower masks."""
    torch.manual_seed(seed)
    c = parse(json.loads((out / "speaker" / "config.json").read_text()))
    setup = setup_of(c)
    follower, _, _ = vln_checkpoint.load(out / "agent" / "best.pt")
    speaker, _, _ = vln_checkpoint.load(out / "speaker" / "best.pt")
    max_words = vln_agent.AgentSettings.of(c).max_words
    inputs = vln_speaker.PathInputs(setup.world)
    bt = vln_agent.BackTranslation(speaker, inputs, setup.vocab, max_words)
    paths, refs = quality.one_per_path(setup.split("val_seen"))
    data = setup.world.data
    rows = [
        {
            "seed": seed,
            "words": "greedy, clean features (the fidelity table's)",
            **quality.fidelity(
                data,
                paths,
                vln_speaker.write_instructions(speaker, inputs, paths, setup.vocab),
                refs,
            ),
        }
    ]
    masked = []
    for _ in range(draws):
        follower.train()  # the mask is drawn only in training mode, as in the augment stage
        mask = follower.env_drop_mask(len(paths), torch.device("cpu"))
        follower.eval()
        hyps = [setup.vocab.decode(r.tolist()) for r in bt.ids(paths, mask)]
        masked.append(quality.fidelity(data, paths, hyps, refs))
    mean = pd.DataFrame(masked).mean().to_dict()
    rows.append(
        {"seed": seed, "words": f"back-translated, follower's mask ({draws} draws)", **mean}
    )
    return [{k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "runs" / "fedvln"))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--draws", type=int, default=3)
    p.add_argument("--results-dir", default=str(RESULTS))
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for seed in a.seeds:
        out = Path(a.out) / f"seed{seed}"
        if not (out / "speaker" / "best.pt").is_file() or not (out / "agent" / "best.pt").is_file():
            print(f"{out}: no federated speaker or agent yet, skipped")
            continue
        rows += scores(out, seed, a.draws)
    if not rows:
        return 1
    table = pd.DataFrame(rows)[["seed", "words", *PARTS]]
    dest = Path(a.results_dir) / "fedvln_backtranslation.csv"
    dest.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(dest, index=False)
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
