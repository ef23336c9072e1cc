"""Training, BLEU and instruction writing of the speaker, in plain PyTorch (no flwr).

BLEU-4 is sacrebleu's corpus BLEU of one greedy instruction per path against that path's
human references (R2R has 3), both in R2R's tokenization (`envs.vln_vocab.split_sentence`,
so sacrebleu is told not to re-tokenize). A path with fewer references repeats its first one,
which leaves clipped counts and the closest reference length unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from envs.vln_data import Episode, VLNData
from envs.vln_env import World, path_steps
from envs.vln_fidelity import route_facts
from envs.vln_fidelity import stats as fidelity_stats
from envs.vln_vocab import Vocab
from models.speaker import Speaker
from training.vln_loop import train_steps
from training.vln_speaker_quality import corpus_bleu, one_per_path


@dataclass(frozen=True)
class SpeakerSettings:
    batch_size: int = 32
    lr: float = 1e-3
    max_words: int = 80


class PathInputs:
    """Speaker inputs per path, computed once: (actions (T, F), panoramas (T, 36, F))."""

    def __init__(self, world: World):
        self.world, self._cache = world, {}

    def __call__(self, episodes: list[Episode], device):
        items = []
        for e in episodes:
            key = (e.scan, e.path, e.heading)
            if key not in self._cache:
                scan = self.world.scan(e.scan)
                nodes = [scan.index[v] for v in e.path]
                pano, act = path_steps(self.world, e.scan, nodes, e.heading)
                self._cache[key] = (act, pano)
            items.append(self._cache[key])
        T = max(a.shape[0] for a, _ in items)
        F = items[0][0].shape[1]
        acts = np.zeros((len(items), T, F), dtype=np.float32)
        panos = np.zeros((len(items), T, 36, F), dtype=np.float32)
        mask = np.zeros((len(items), T), dtype=bool)
        for b, (a, p) in enumerate(items):
            acts[b, : len(a)], panos[b, : len(a)], mask[b, : len(a)] = a, p, True
        return (
            torch.from_numpy(acts).to(device),
            torch.from_numpy(panos).to(device),
            torch.from_numpy(mask).to(device),
        )


def train_batches(
    speaker: Speaker,
    optimizer,
    inputs: PathInputs,
    episodes: list[Episode],
    vocab: Vocab,
    s: SpeakerSettings,
    *,
    iterations: int,
    rng: np.random.Generator,
    progress=None,
) -> float:
    """`iterations` teacher-forced minibatch updates; returns the mean cross-entropy."""
    dev = next(speaker.parameters()).device

    def loss_of(batch):
        acts, panos, mask = inputs(batch, dev)
        tokens = torch.from_numpy(
            np.stack([vocab.encode(e.instruction, s.max_words) for e in batch])
        ).to(dev)
        return speaker.loss(acts, panos, mask, tokens)

    return train_steps(
        speaker, optimizer, episodes, s.batch_size, iterations, rng, loss_of, progress
    )


@torch.no_grad()
def write_instructions(
    speaker: Speaker,
    inputs: PathInputs,
    episodes: list[Episode],
    vocab: Vocab,
    *,
    sample: bool = False,
    seed: int = 0,
    max_words: int = 80,
) -> list[str]:
    """One generated instruction per episode's path (greedy, or sampled for augmentation)."""
    dev = next(speaker.parameters()).device
    was_training = speaker.training
    speaker.eval()
    gen = torch.Generator(device=dev).manual_seed(seed)
    out = []
    for i in range(0, len(episodes), 64):
        acts, panos, mask = inputs(episodes[i : i + 64], dev)
        ids = speaker.generate(acts, panos, mask, vocab.bos, max_words, sample, gen)
        out.extend(vocab.decode(row) for row in ids.cpu().numpy())
    speaker.train(was_training)
    return out


def _score(speaker, inputs, episodes, vocab):
    paths, refs = one_per_path(episodes)
    hyps = write_instructions(speaker, inputs, paths, vocab)
    return corpus_bleu(hyps, paths, refs), len(hyps)


def bleu(speaker: Speaker, inputs: PathInputs, episodes: list[Episode], vocab: Vocab) -> float:
    """Corpus BLEU-4 (0-100) of greedy instructions, one per path, against its references."""
    return float(_score(speaker, inputs, episodes, vocab)[0].score)


def bleu_stats(
    speaker: Speaker,
    inputs: PathInputs,
    episodes: list[Episode],
    vocab: Vocab,
    data: VLNData | None = None,
) -> dict[str, float]:
    """The sufficient statistics of corpus BLEU (lengths and n-gram matches/totals, n = 1..4)
    over these paths: summed over houses they give the BLEU of the union
    (`strategies.fedvln_strategy.pool`) without any instruction leaving its house. With the
    data folder, also route fidelity's counts (`envs.vln_fidelity.stats`, keys `fid_*`) of
    the same instructions, pooled the same way."""
    paths, refs = one_per_path(episodes)
    hyps = write_instructions(speaker, inputs, paths, vocab)
    score = corpus_bleu(hyps, paths, refs)
    out = {"n": len(hyps), "sys_len": int(score.sys_len), "ref_len": int(score.ref_len)}
    for i in range(4):
        out[f"correct_{i + 1}"] = int(score.counts[i])
        out[f"total_{i + 1}"] = int(score.totals[i])
    if data is not None:
        facts = [route_facts(data, p, refs[p.path_id]) for p in paths]
        out.update({f"fid_{k}": v for k, v in fidelity_stats(list(zip(hyps, facts))).items()})
    return out
