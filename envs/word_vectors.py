"""Word vectors for Text2Action's beta party: word2vec trained here, on the three EASDRL corpora.

The FedRL paper (Sec. 5.2) gives beta "word vectors generated from the pre-trained word
embeddings"; the reference loads `data/mymodel-new-5-50` (FRL2019/FRL text2action/main.py), a
50-d word2vec model that is not published with the data. Our substitute, named as such
everywhere it is reported: gensim's Word2Vec (skip-gram, 50 dimensions, window 5, min count 1,
as the file name suggests) trained on the words of win2k, cooking and wikihow together (~94k
tokens), lower-cased as the corpora are. It is trained once per (data dir, dimension, seed) and
cached next to nothing shared: under `$FEDEMBODIED_CACHE` (default `~/.cache/fedembodied`).
One worker thread and a fixed hash function make it reproducible (gensim's default hash is
Python's salted `hash`).
"""

from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path

import numpy as np

from envs.text2action_data import DOMAINS, load_domain

DIM = 50


def _crc(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def cache_dir() -> Path:
    return Path(os.environ.get("FEDEMBODIED_CACHE", Path.home() / ".cache" / "fedembodied"))


def word_vectors(data_dir: str | Path, dim: int = DIM, seed: int = 0) -> dict[str, np.ndarray]:
    """word -> vector (float32, `dim`) for every word of the three corpora."""
    from gensim.models import Word2Vec

    sentences = [[w.lower() for w in t.words] for d in DOMAINS for t in load_domain(data_dir, d)]
    key = hashlib.sha256(
        repr(
            (sorted(map(len, sentences)), sum(map(len, sentences)), dim, seed, sentences[0][:50])
        ).encode()
    ).hexdigest()[:16]
    path = cache_dir() / f"text2action_w2v_{key}.npz"
    if path.is_file():
        z = np.load(path, allow_pickle=False)
        return dict(zip(z["words"].tolist(), z["vectors"]))
    model = Word2Vec(
        sentences,
        vector_size=dim,
        window=5,
        min_count=1,
        sg=1,
        workers=1,
        seed=seed,
        epochs=10,
        hashfxn=_crc,
    )
    words = list(model.wv.index_to_key)
    vectors = np.asarray(model.wv[words], np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, words=np.array(words), vectors=vectors)
    os.replace(tmp, path)
    return dict(zip(words, vectors))


def word_table(words: list[list[str]], num_words: int, data_dir: str | Path) -> np.ndarray:
    """(texts, num_words, DIM) word vectors of each text's words, zeros past its end."""
    vec = word_vectors(data_dir)
    out = np.zeros((len(words), num_words, DIM), np.float32)
    for i, text in enumerate(words):
        for j, w in enumerate(text[:num_words]):
            v = vec.get(w.lower())
            if v is not None:
                out[i, j] = v
    return out
