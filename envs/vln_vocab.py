"""R2R's tokenizer and vocabulary, as the Envdrop code defines them (no flwr).

Lower-case; split on runs of non-alphanumeric characters, keeping punctuation runs as tokens
(a run of several punctuation marks becomes one token per mark); words seen fewer than
`min_count` times in training become `<UNK>`. Indices 0-2 are `<PAD> <UNK> <EOS>` (the order of
R2R's `train_vocab.txt`) and `<BOS>` is appended after the words, as Envdrop does.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from pathlib import Path

import numpy as np

from envs.errors import DataError

BASE = ["<PAD>", "<UNK>", "<EOS>"]
PAD, UNK, EOS = 0, 1, 2
_SPLIT = re.compile(r"(\W+)")


def split_sentence(sentence: str) -> list[str]:
    toks = []
    for word in (w.strip().lower() for w in _SPLIT.split(sentence.strip())):
        if not word:
            continue
        if len(word) > 1 and all(c in string.punctuation for c in word):
            toks.extend(word)
        else:
            toks.append(word)
    return toks


class Vocab:
    def __init__(self, words: list[str]):
        if words[:3] != BASE:
            raise DataError(f"vocabulary must start with {BASE}, got {words[:3]}")
        self.words = list(words) + ([] if "<BOS>" in words else ["<BOS>"])
        self.index = {w: i for i, w in enumerate(self.words)}
        self.bos = self.index["<BOS>"]

    @classmethod
    def build(cls, sentences, min_count: int = 5) -> "Vocab":
        counts = Counter(t for s in sentences for t in split_sentence(s))
        kept = sorted(
            (w for w, c in counts.items() if c >= min_count and w not in BASE),
            key=lambda w: (-counts[w], w),
        )
        return cls(BASE + kept)

    @classmethod
    def read(cls, path: str | Path) -> "Vocab":
        path = Path(path)
        if not path.is_file():
            raise DataError(f"{path}: vocabulary file not found")
        try:
            words = [w for w in path.read_text(encoding="utf-8").splitlines() if w]
        except UnicodeDecodeError as e:
            raise DataError(
                f"{path}: not a UTF-8 word list ({e.reason} at byte {e.start})"
            ) from None
        try:
            return cls(words)
        except DataError as e:
            raise DataError(f"{path}: {e}") from None

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, sentence: str, max_len: int) -> np.ndarray:
        """`<BOS> tokens <EOS>`, truncated to max_len (EOS kept) and padded with `<PAD>`."""
        ids = [self.index.get(t, UNK) for t in split_sentence(sentence)][: max_len - 2]
        out = np.zeros(max_len, dtype=np.int64)
        seq = [self.bos] + ids + [EOS]
        out[: len(seq)] = seq
        return out

    def decode(self, ids) -> str:
        """Words up to the first `<EOS>`/`<PAD>`, `<BOS>` dropped."""
        out = []
        for i in ids:
            i = int(i)
            if i in (EOS, PAD):
                break
            if i != self.bos:
                out.append(self.words[i])
        return " ".join(out)
