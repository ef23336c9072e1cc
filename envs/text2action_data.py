"""The FedRL paper's Text2Action data (EASDRL: Feng et al. 2018), read safely.

The corpora are Python 2 pickles (`<domain>_labeled_text_data.pkl`, `<domain>_dependency.pkl`,
`indices/<domain>_act_<k>_fold_indices.pkl`). Unpickling can run code, so `safe_load` uses an
Unpickler whose `find_class` allows only what these files contain besides plain lists, dicts,
strings and numbers: numpy's array reconstruction (`numpy.core.multiarray._reconstruct`,
`numpy.ndarray`, `numpy.dtype`). Anything else is a DataError naming the file and the global.

`load_domain` returns one ActText per text, as the reference's `read_act_texts`
(FRL2019/FRL text2action/Environment.py) builds it for the action-name task: the words, a tag
per word (1 = not an action; 2, 3, 4 = an action of type 1, 2, 3, as `act_type + 1` there) and
the word's part-of-speech tag from the dependency file, and for each action the actions it
excludes (`act2related` there). The environment is envs/text2action.py.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from envs import prepared
from envs.errors import DataError

DOMAINS = ("win2k", "cooking", "wikihow")
ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
}


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        if module.endswith("multiarray"):  # numpy 2 keeps it in numpy._core (numpy 1: core)
            import importlib

            core = "numpy._core.multiarray" if hasattr(np, "_core") else "numpy.core.multiarray"
            return getattr(importlib.import_module(core), name)
        return getattr(np, name)


# The shipped corpora are at most 4.1 MB and expand to ~10x their bytes in list items; a small
# pickle whose lists reference one another (a 1 KB file of 30 levels, each a list holding the
# level below twice) loads at once but expands to 2^30 items when walked, and hung the reader.
MAX_BYTES = 256 << 20
MAX_ITEMS_PER_BYTE = 64


def _expansion_bounded(obj, budget: int, path: Path) -> None:
    """Walk `obj` as the readers will (shared references counted every time they are met),
    refusing it once more than `budget` items have been met."""
    stack, seen = [obj], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > budget:
            raise DataError(
                f"{path}: expands to more than {budget} items when read (lists or dicts that "
                "reference one another); not a Text2Action pickle"
            )
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)


def read_file(path: Path | str) -> prepared.FileBytes:
    """A Text2Action file's bytes and digest (envs/prepared.py), of bounded size."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise DataError(f"{path}: {size} bytes, over the {MAX_BYTES} a Text2Action pickle may have")
    return prepared.read_file(path)


def safe_load(path: Path | str | prepared.FileBytes):
    """The pickle at `path` (or read by `read_file`), built from plain data and numpy arrays
    only, of bounded size and expansion (`MAX_BYTES`, `MAX_ITEMS_PER_BYTE` items per byte)."""
    f = path if isinstance(path, prepared.FileBytes) else read_file(path)
    path, size = f.path, len(f.data)
    try:
        obj = _Restricted(f.stream, encoding="latin1").load()
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
        MemoryError,
        RecursionError,
    ) as e:
        raise DataError(
            f"{path}: not a Text2Action pickle that loads without running code "
            f"({type(e).__name__}: {e})"
        ) from None
    _expansion_bounded(obj, max(MAX_ITEMS_PER_BYTE * size, 10_000), path)
    return obj


@dataclass
class ActText:
    words: list[str]
    tags: np.ndarray  # per word: 1 not an action, 2-4 an action (act_type + 1)
    pos: list[str]  # per word: its part-of-speech tag
    related: dict[int, list[int]]  # exclusive action (tag 4) -> the actions it excludes


def load_domain(data_dir: Path | str, domain: str) -> list[ActText]:
    """Every text of `domain`, with each word's action tag and POS tag (checked to align),
    parsed once per node: reading the pickles through the restricted Unpickler takes 0.1-0.7 s
    a domain, and a deployed party is a fresh process per message (envs/prepared.py, keyed by
    the two files' SHA-256, so a changed file is parsed again)."""
    if domain not in DOMAINS:
        raise DataError(f"unknown Text2Action domain {domain!r} (choose from {', '.join(DOMAINS)})")
    return kept_domain(*(read_file(p) for p in domain_files(data_dir, domain)))


def domain_files(data_dir: Path | str, domain: str) -> tuple[Path, Path]:
    """`domain`'s texts and dependency pickles."""
    root = Path(data_dir)
    return root / f"{domain}_labeled_text_data.pkl", root / f"{domain}_dependency.pkl"


def kept_domain(texts: prepared.FileBytes, deps: prepared.FileBytes) -> list[ActText]:
    """The domain parsed from these very bytes, or read back from the node's disk under their
    digests (a kept copy that does not unpack is parsed again)."""
    return prepared.kept("text2action-domain", (texts.digest, deps.digest),
                         lambda: _pack(_parse_domain(texts, deps)), read=_unpack)  # fmt: skip


def _parse_domain(texts_file: prepared.FileBytes, dep_file: prepared.FileBytes) -> list[ActText]:
    texts_path, dep_path = texts_file.path, dep_file.path
    texts, deps = safe_load(texts_file), safe_load(dep_file)
    if not isinstance(texts, list) or not isinstance(deps, list) or len(texts) != len(deps):
        raise DataError(f"{texts_path}, {dep_path}: expected two lists of equal length")
    out = []
    for i, (t, dep) in enumerate(zip(texts, deps)):
        try:
            words = [str(w) for w in t["words"]]
            pos = [str(p) for sent in dep for _, p in sent]
            tags = np.ones(len(words), np.int64)
            related = {}
            for act in t["acts"]:
                idx, rel = int(act["act_idx"]), [int(j) for j in act["related_acts"]]
                bad = [j for j in (idx, *rel) if not 0 <= j < len(words)]
                if bad:  # a negative index would silently tag a word from the end
                    raise DataError(
                        f"{texts_path}: text {i}: action index {bad[0]} outside its "
                        f"{len(words)} words (act_idx / related_acts)"
                    )
                tags[idx] = int(act["act_type"]) + 1
                related[idx] = rel
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise DataError(f"{texts_path}: text {i}: missing or malformed field {e}") from None
        if len(pos) != len(words):
            raise DataError(f"{dep_path}: text {i} has {len(pos)} POS tags for {len(words)} words")
        if not set(np.unique(tags)) <= {1, 2, 3, 4}:
            raise DataError(f"{texts_path}: text {i}: act_type outside 1-3")
        out.append(ActText(words, tags, pos, related))
    return out


def _pack(texts: list[ActText]) -> dict[str, np.ndarray]:
    """The texts as flat arrays (envs/prepared.py stores arrays only)."""
    acts = [(i, a, len(r)) for i, t in enumerate(texts) for a, r in t.related.items()]
    return {
        "lengths": np.array([len(t.words) for t in texts], np.int64),
        "tags": np.concatenate([t.tags for t in texts] or [np.zeros(0, np.int64)]),
        "acts": np.array(acts, np.int64).reshape(-1, 3),  # text, action, how many it excludes
        "excluded": np.array([j for t in texts for r in t.related.values() for j in r], np.int64),
        **prepared.pack_strings("words", [w for t in texts for w in t.words]),
        **prepared.pack_strings("pos", [p for t in texts for p in t.pos]),
    }


def _unpack(a: dict[str, np.ndarray]) -> list[ActText]:
    words = prepared.unpack_strings(a, "words")
    pos = prepared.unpack_strings(a, "pos")
    if not len(words) == len(pos) == a["tags"].size == int(a["lengths"].sum()):
        raise ValueError("a kept Text2Action domain of another layout")
    related: list[dict[int, list[int]]] = [{} for _ in a["lengths"]]
    k = 0
    for i, act, n in a["acts"].tolist():
        related[i][act] = a["excluded"][k : k + n].tolist()
        k += n
    ends = np.cumsum(a["lengths"]).tolist()
    return [ActText(words[s:e], a["tags"][s:e].copy(), pos[s:e], related[i])
            for i, (s, e) in enumerate(zip([0, *ends[:-1]], ends))]  # fmt: skip


def folds(data_dir: Path | str, domain: str, k: int) -> list[np.ndarray]:
    """The official k-fold split of `domain`'s texts (indices into load_domain's list)."""
    path = Path(data_dir) / "indices" / f"{domain}_act_{k}_fold_indices.pkl"
    raw = safe_load(path)
    try:
        parts = [np.asarray(f, dtype=np.int64).reshape(-1) for f in raw]
    except (TypeError, ValueError) as e:
        raise DataError(f"{path}: folds are not index arrays ({e})") from None
    return parts
