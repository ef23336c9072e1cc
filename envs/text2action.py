"""Text2Action as EASDRL defines it (Feng et al. 2018; FedRL paper Sec. 5.2): walk a text word by
word and select each word as an action name or neglect it.

Everything here follows the reference's action-name mode (FRL2019/FRL text2action/Environment.py
`read_act_texts`, `create_matrix`, `act`, and DQNAgent.py `step`, `compute_f1`):
- A text is cut to its first `num_words` words (the reference's `num_words`, 500). An episode
  tags them in order; the state is the whole text with the tags given so far (0 untagged,
  1 neglected, 2 selected), so the word being decided is the first untagged one.
- Reward of tagging word t (reward_base 50, reward_assign [1, 2, 3]): a required action (label
  2) +-100 for select/neglect; an optional one (3) +50 if selected, 0 if not; an exclusive one
  (4) +-150 by whether it is right given its related actions already selected; a non-action (1)
  +-50. Additional reward (the prior on the proportion of action words): with rho = selected
  words so far / num_words, a non-zero reward gets +5 rho^2 x 50 when positive and rho <= 0.05,
  else -5 rho^2 x 50. The episode's last word earns +2 more (DQNAgent.step's terminal bonus).
- Precision, recall, F1 over action words, summed over all texts of a split (compute_f1 and
  `test`: an optional action counts only when selected; an exclusive group once). AvgRwd is the
  total reward over the total steps of the split (paper Sec. 5.2).

Splits: the official k-fold indices; fold `fold` is the test split, and `valid_every`-th text of
the rest (in index order) is the validation split that selects the checkpoint. (The reference
selects its best epoch on the held-out fold itself and reports that score; we do not.)

`Corpus` holds the texts of one domain with what each party turns into features: POS ids (over
the POS tags of all three domains, as the reference's `build_dict`) for alpha, words for beta.
`TextWorld` steps B texts together with the Grid-World API (`obs_alpha`, `obs_beta`, `step`,
`active`, `state`), so the FedRL parties and baselines run it unchanged. An observation is one
int16 row per slot: [text id, tag of word 0, ..., tag of word num_words-1]; each party's
network looks up its own features of that text (models/text_cnn.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from envs.errors import DataError, missing
from envs.text2action_data import folds, load_domain

REWARD_BASE = 50.0
REWARD_ASSIGN = (1.0, 2.0, 3.0)
ACTION_RATE = 0.05
TERMINAL_BONUS = 2.0
NEGLECT, SELECT = 0, 1


@dataclass
class Corpus:
    words: list[list[str]]  # per text, its first num_words words
    labels: np.ndarray  # (texts, num_words) int8: 1-4 as the data, 0 past the end
    pos: np.ndarray  # (texts, num_words) int64 POS ids, 0 = padding
    related: list[dict[int, list[int]]]
    lengths: np.ndarray  # words per text after the cut
    n_pos: int  # POS vocabulary size (+1 for padding)
    splits: dict[str, np.ndarray]  # train / valid / test text ids
    num_words: int


@lru_cache(maxsize=8)
def load_corpus(
    data_dir: str, domain: str, num_words: int, k_fold: int, fold: int, valid_every: int
) -> Corpus:
    if not data_dir:
        raise DataError(
            "fedrl.t2a-data is empty: Text2Action needs the EASDRL pickles "
            "(../shared/data/text2action)"
        )
    if not Path(data_dir).is_dir():
        raise DataError(f"fedrl.t2a-data: {missing(data_dir, 'folder')}")
    pos_dict = {"PAD": 0}
    for d in ("cooking", "win2k", "wikihow"):  # the reference's order, all three domains
        for t in load_domain(data_dir, d):
            for p in t.pos:
                pos_dict.setdefault(p, len(pos_dict))
    texts = load_domain(data_dir, domain)
    n = len(texts)
    labels = np.zeros((n, num_words), np.int8)
    pos = np.zeros((n, num_words), np.int64)
    lengths = np.zeros(n, np.int64)
    for i, t in enumerate(texts):
        m = min(len(t.words), num_words)
        labels[i, :m] = t.tags[:m]
        pos[i, :m] = [pos_dict[p] for p in t.pos[:m]]
        lengths[i] = m
    parts = folds(data_dir, domain, k_fold)
    if not 0 <= fold < len(parts):
        raise DataError(f"fedrl.t2a-fold: {fold} is not a fold of the {len(parts)}-fold split")
    test = np.sort(parts[fold])
    rest = np.sort(np.concatenate([p for j, p in enumerate(parts) if j != fold]))
    if len(test) == 0 or test.max() >= n or rest.max() >= n:
        raise DataError(f"{data_dir}/indices: {domain} folds index past its {n} texts")
    if test.min() < 0 or rest.min() < 0:  # numpy would read -1 as the last text
        raise DataError(f"{data_dir}/indices: {domain} folds hold negative text indices")
    if np.intersect1d(test, rest).size:
        raise DataError(
            f"{data_dir}/indices: {domain} fold {fold} shares texts with the other folds "
            "(test would overlap train)"
        )
    valid = rest[::valid_every] if valid_every else rest[:0]
    train = np.setdiff1d(rest, valid)
    # exclusions with a word past the cut cannot be decided, so they are dropped
    related = [
        {a: [j for j in rel if j < num_words] for a, rel in t.related.items() if a < num_words}
        for t in texts
    ]
    return Corpus(
        [t.words[:num_words] for t in texts],
        labels,
        pos,
        related,
        lengths,
        len(pos_dict),
        {"train": train, "valid": valid, "test": test},
        num_words,
    )


def reward(
    label: int, action: int, t: int, tags: np.ndarray, related: dict, num_words: int
) -> float:
    """Environment.act (act mode) for tagging word t with `action`; `tags` already holds it."""
    ra, base = REWARD_ASSIGN, REWARD_BASE
    if label == 2:
        r = ra[1] * base if action == SELECT else -ra[1] * base
    elif label == 3:
        r = ra[0] * base if action == SELECT else 0.0
    elif label == 4:
        others = related.get(t, [])
        excluded = any(tags[j] == 2 for j in others)  # a related action already selected
        later = any(j > t for j in others)
        if action == SELECT and not excluded:
            r = ra[2] * base
        elif action == NEGLECT and (excluded or later):
            r = ra[2] * base
        else:
            r = -ra[2] * base
    else:
        r = ra[0] * base if action == NEGLECT else -ra[0] * base
    if r != 0:
        rate = float((tags[: t + 1] == 2).sum()) / num_words
        extra = 5.0 * rate**2 * base
        r = r + extra if (rate <= ACTION_RATE and r > 0) else r - extra
    return r


def expert_action(label: int, t: int, tags: np.ndarray, related: dict) -> int:
    """The action with the larger basic reward (the FCN baselines' label)."""
    if label in (2, 3):
        return SELECT
    if label == 4:
        return NEGLECT if any(tags[j] == 2 for j in related.get(t, [])) else SELECT
    return NEGLECT


def f1_counts(labels: np.ndarray, tags: np.ndarray, related: dict, length: int) -> np.ndarray:
    """compute_f1 (act mode) of one tagged text: (total, right, tagged) action words."""
    total = right = tagged = 0
    seen: list[int] = []
    for s in range(length):
        lab, tag = labels[s], tags[s]
        tagged += tag == 2
        if lab == 2:
            total += 1
            right += tag == 2
        elif lab == 3 and tag == 2:
            total += 1
            right += 1
        elif lab == 4:
            if s not in seen:
                total += 1
                seen.append(s)
            others = related.get(s, [])
            seen.extend(others)
            if tag == 2 and not any(tags[j] == 2 for j in others):
                right += 1
    return np.array([total, right, tagged], np.int64)


def prf(counts: np.ndarray) -> dict[str, float]:
    total, right, tagged = (float(x) for x in counts)
    rec = right / total if total else 0.0
    pre = right / tagged if tagged else 0.0
    f1 = 2 * pre * rec / (pre + rec) if pre + rec else 0.0
    return {"precision": pre, "recall": rec, "f1": f1}


class TextWorld:
    """B texts tagged together. Training: slot b's e-th episode takes the next text of its own
    seeded shuffle of the train texts (reshuffled each pass). Evaluation: one episode per text
    of the split, all at once."""

    STATE = ("text", "t", "episode", "active", "tags", "obs", "counts", "steps")

    def __init__(
        self,
        corpus: Corpus,
        split: str,
        n_envs: int,
        *,
        seed: int = 0,
        evaluation: bool = False,
        reset: bool = True,
    ):
        self.c, self.ids = corpus, corpus.splits[split]
        if not len(self.ids):
            raise DataError(f"Text2Action split {split!r} has no texts")
        self.seed, self.evaluation = seed, evaluation
        self.B = len(self.ids) if evaluation else n_envs
        N = corpus.num_words
        self.text = np.zeros(self.B, np.int64)
        self.t = np.zeros(self.B, np.int64)
        self.episode = np.zeros(self.B, np.int64)
        self.active = np.ones(self.B, bool)
        self.tags = np.zeros((self.B, N), np.int16)
        self.obs = np.zeros((self.B, N + 1), np.int16)
        self.counts = np.zeros(3, np.int64)  # evaluation: F1 counts of finished texts
        self.steps = np.zeros(1, np.int64)  # evaluation: words tagged
        for b in range(self.B if reset else 0):
            self._reset(b)

    @property
    def obs_alpha(self) -> np.ndarray:
        return self.obs

    @property
    def obs_beta(self) -> np.ndarray:
        return self.obs

    def _choose(self, b: int) -> int:
        if self.evaluation:
            return int(self.ids[b])
        e, n = int(self.episode[b]), len(self.ids)
        order = np.random.default_rng([self.seed, b, e // n]).permutation(self.ids)
        return int(order[e % n])

    def _reset(self, b: int) -> None:
        self.text[b] = self._choose(b)
        self.t[b] = 0
        self.tags[b] = 0
        self.obs[b, 0] = self.text[b]
        self.obs[b, 1:] = 0

    def expert(self) -> np.ndarray:
        """Per slot, the expert's action on its current word (FCN labels)."""
        return np.array(
            [
                expert_action(int(self.c.labels[i, t]), int(t), self.tags[b], self.c.related[i])
                for b, (i, t) in enumerate(zip(self.text, self.t))
            ],
            np.int64,
        )

    def step(self, a_alpha: np.ndarray, a_beta: np.ndarray | None = None):
        """Tag every active slot's current word with the joint action `a_alpha` (beta's move is
        the same joint action). Returns (reward, done, met, next obs, next obs) as GridWorld;
        `met` is always False (Text2Action has no success event)."""
        a = np.asarray(a_alpha)
        r = np.zeros(self.B, np.float32)
        done = np.zeros(self.B, bool)
        for b in np.flatnonzero(self.active):
            i, t, act = int(self.text[b]), int(self.t[b]), int(a[b])
            if act not in (NEGLECT, SELECT):
                raise ValueError(f"Text2Action action must be 0 or 1, got {act}")
            self.tags[b, t] = act + 1
            r[b] = reward(
                int(self.c.labels[i, t]), act, t, self.tags[b], self.c.related[i], self.c.num_words
            )
            self.t[b] = t + 1
            done[b] = self.t[b] >= self.c.lengths[i]
            r[b] += TERMINAL_BONUS * done[b]
        self.obs[:, 1:] = self.tags
        nxt = self.obs.copy()
        if self.evaluation:
            self.steps += int(self.active.sum())
        for b in np.flatnonzero(done):
            if self.evaluation:
                i = int(self.text[b])
                self.counts += f1_counts(
                    self.c.labels[i], self.tags[b], self.c.related[i], int(self.c.lengths[i])
                )
                self.active[b] = False
            else:
                self.episode[b] += 1
                self._reset(b)
        return r, done, np.zeros(self.B, bool), nxt, nxt

    @property
    def longest(self) -> int:
        """Most steps an evaluation play of this world takes: one per word of its longest text
        (every play of a split takes exactly that many, whatever the policy does)."""
        return int(self.c.lengths[self.ids].max())

    def report(self, reward_sum: np.ndarray, met: np.ndarray) -> dict[str, float]:
        """An evaluation's scores: precision, recall, F1 over the split, and AvgRwd per step."""
        return {**prf(self.counts), "avg-reward": float(np.sum(reward_sum) / max(1, self.steps[0]))}

    def state(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k).copy() for k in self.STATE}

    def load_state(self, arrays: dict[str, np.ndarray]) -> None:
        for k in self.STATE:
            setattr(self, k, np.array(arrays[k]).astype(getattr(self, k).dtype))
