"""Instruments a constant sentence cannot pass: what a speaker says, scored three ways beside
its floors (plain PyTorch, no flwr).

Issue 41: on the embedded houses one sentence written for every path scores the BLEU-4 of a
trained speaker, so BLEU alone measures nothing there. Every speaker result is therefore
reported with

- BLEU-4 (`training.vln_speaker`) beside two floor rows on the same references: the best
  *constant* sentence (the train instruction with the highest BLEU when written for every
  train path, `best_constant`) and *another path's* true instruction in the same house
  (`other_path`);
- route fidelity (`envs.vln_fidelity`): does it name the rooms, goal and stop object of its
  own route (true references and the same floors beside it);
- what it teaches (`teaching`): a trained follower's SR on the speaker's instruction for each
  val route, beside its SR on the true ones and on the floors'.

`said_rows` is what a speaker wrote for each val path, for a CSV anyone can read and score.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np
from sacrebleu.metrics import BLEU

from envs.vln_data import Episode, VLNData
from envs.vln_fidelity import route_facts, score
from envs.vln_vocab import split_sentence

if TYPE_CHECKING:  # pandas' import is 0.36 s of every deployed FedVLN message (a fresh process)
    import pandas as pd

CONSTANT_CANDIDATES = 400  # train instructions tried as the constant floor (seeded sample)


def one_per_path(episodes: list[Episode]) -> tuple[list[Episode], dict[int, list[str]]]:
    """(the first episode of each path, in order; {path_id: its references, tokenized})."""
    refs: dict[int, list[str]] = defaultdict(list)
    first: dict[int, Episode] = {}
    for e in episodes:
        refs[e.path_id].append(" ".join(split_sentence(e.instruction)))
        first.setdefault(e.path_id, e)
    return list(first.values()), dict(refs)


def _bleu(paths: list[Episode], refs: dict[int, list[str]]) -> BLEU:
    """sacrebleu's BLEU with these paths' references cached (R2R-tokenized already); a path
    with fewer references repeats its first (clipped counts and closest length unchanged)."""
    n = max(len(refs[p.path_id]) for p in paths)
    streams = [
        [refs[p.path_id][k] if k < len(refs[p.path_id]) else refs[p.path_id][0] for p in paths]
        for k in range(n)
    ]
    return BLEU(tokenize="none", force=True, references=streams)


def corpus_bleu(hyps: list[str], paths: list[Episode], refs: dict[int, list[str]]):
    """sacrebleu corpus BLEU-4 of one hypothesis per path against its references."""
    return _bleu(paths, refs).corpus_score([" ".join(split_sentence(h)) for h in hyps], None)


def best_constant(train: list[Episode], seed: int = 0) -> str:
    """The constant floor: of (a seeded sample of) the train instructions, the one with the
    highest corpus BLEU when written for every train path. Chosen on train, scored on val."""
    paths, refs = one_per_path(train)
    texts = sorted({e.instruction for e in train})
    if len(texts) > CONSTANT_CANDIDATES:
        pick = np.random.default_rng(seed).choice(len(texts), CONSTANT_CANDIDATES, replace=False)
        texts = [texts[i] for i in sorted(pick)]
    bleu = _bleu(paths, refs)
    return max(
        texts,
        key=lambda t: bleu.corpus_score([" ".join(split_sentence(t))] * len(paths), None).score,
    )


def other_path(paths: list[Episode]) -> list[str]:
    """The other-path floor: for each path, the first true instruction of the next path of the
    same house (in order, wrapping); a house with one path keeps its own (flagged by no
    floor at all, so it is left as is)."""
    by_house: dict[str, list[Episode]] = defaultdict(list)
    for p in paths:
        by_house[p.scan].append(p)
    out = []
    for p in paths:
        same = by_house[p.scan]
        out.append(same[(same.index(p) + 1) % len(same)].instruction)
    return out


def fidelity(
    data: VLNData, paths: list[Episode], hyps: list[str], refs: dict[int, list[str]]
) -> dict[str, float]:
    """`envs.vln_fidelity.score` of one instruction per path against its route's facts (the
    stop object from `refs`, each path's true instructions: `one_per_path`'s second value;
    a route with none, a sampled one, is not scored on its stop object)."""
    return score([(h, route_facts(data, p, refs.get(p.path_id, ()))) for h, p in zip(hyps, paths)])


def teaching(follower, world, paths: list[Episode], hyps: list[str], tokens, settings) -> float:
    """A follower's val SR (0-100) when each route is instructed by `hyps` (one per path)."""
    from training import vln_agent

    eps = [
        dataclasses.replace(p, instr_id=f"{p.path_id}_said", instruction=h)
        for p, h in zip(paths, hyps)
    ]
    m, _ = vln_agent.evaluate(follower, world, eps, tokens, settings)
    return float(m["sr"])


def teaching_gain(sr: float, constant_sr: float, true_sr: float) -> float:
    """What a speaker teaches beyond a constant sentence, as a share of what the true words
    teach beyond it: (speaker - constant) / (true - constant), 0 at the constant, 1 at the
    true words (issue 64). The plain ratio speaker / true credited a speaker with what the
    constant already gets (0.43 for one sentence on every route); NaN where the true words
    teach no more than the constant (the follower reads nothing)."""
    return (sr - constant_sr) / (true_sr - constant_sr) if true_sr > constant_sr else float("nan")


def with_teaching_gain(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` (seed, speaker, split, taught_sr, one row of each speaker per seed and split,
    the constant's named "constant..." and the true words' "true...") with `taught_gain`."""
    key = ["seed", "split"]
    sr = rows.set_index(key)
    const = rows[rows["speaker"].str.startswith("constant")].set_index(key)["taught_sr"]
    true = rows[rows["speaker"].str.startswith("true")].set_index(key)["taught_sr"]
    gain = [
        teaching_gain(s, const.get(k, float("nan")), true.get(k, float("nan")))
        for k, s in zip(sr.index, sr["taught_sr"])
    ]
    return rows.assign(taught_gain=gain)


def said_rows(split: str, paths: list[Episode], hyps: list[str], checkpoint: str) -> list[dict]:
    """What a speaker said: one row per val path (split, path id, house, instruction, checkpoint)."""
    return [
        {
            "split": split,
            "path_id": p.path_id,
            "scan": p.scan,
            "instruction": h,
            "checkpoint": checkpoint,
        }
        for p, h in zip(paths, hyps)
    ]
