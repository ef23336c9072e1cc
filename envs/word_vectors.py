"""Word vectors for Text2Action's beta party: word2vec trained here, on the three EASDRL corpora.

The FedRL paper (Sec. 5.2) gives beta "word vectors generated from the pre-trained word
embeddings"; the reference loads `data/mymodel-new-5-50` (FRL2019/FRL text2action/main.py), a
50-d word2vec model that is not published with the data. Our substitute, named as such
everywhere it is reported: gensim's Word2Vec (skip-gram, 50 dimensions, window 5, min count 1,
as the file name suggests) trained on the words of win2k, cooking and wikihow together (~94k
tokens), lower-cased as the corpora are. It is trained once per node and kept on its own disk
(envs/prepared.py, keyed by the corpora files' SHA-256, the dimension, the seed and gensim's
version: a deployed party is a fresh process per message, and gensim's import alone takes
seconds). One worker thread and a fixed hash function make it reproducible (gensim's default
hash is Python's salted `hash`).
"""

from __future__ import annotations

import zlib
from importlib import metadata
from pathlib import Path

import numpy as np

from envs import prepared
from envs import text2action_data as t2a
from envs.text2action_data import DOMAINS

DIM = 50


def _crc(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def word_vectors(data_dir: str | Path, dim: int = DIM, seed: int = 0) -> dict[str, np.ndarray]:
    """word -> vector (float32, `dim`) for every word of the three corpora."""
    files = {d: [t2a.read_file(p) for p in t2a.domain_files(data_dir, d)] for d in DOMAINS}

    def train() -> dict[str, np.ndarray]:
        from gensim.models import Word2Vec  # only here: its import alone takes seconds

        # from the very bytes the key hashes (envs/prepared.FileBytes)
        texts = [t for d in DOMAINS for t in t2a.kept_domain(*files[d])]
        sentences = [[w.lower() for w in t.words] for t in texts]
        model = Word2Vec(sentences, vector_size=dim, window=5, min_count=1, sg=1, workers=1,
                         seed=seed, epochs=10, hashfxn=_crc)  # fmt: skip
        words = list(model.wv.index_to_key)
        return {**prepared.pack_strings("words", words),
                "vectors": np.asarray(model.wv[words], np.float32)}  # fmt: skip

    def read(z: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        words = prepared.unpack_strings(z, "words")
        if z["vectors"].shape != (len(words), dim):
            raise ValueError("kept word vectors of another layout")
        return dict(zip(words, z["vectors"]))

    # gensim's version too: another version may train other vectors from the same corpora
    digests = [f.digest for d in DOMAINS for f in files[d]]
    return prepared.kept("text2action-w2v", (*digests, dim, seed, metadata.version("gensim")),
                         train, read=read)  # fmt: skip


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
