"""Save and reload a follower or speaker with what is needed to rebuild it: its sizes and the
vocabulary it was trained with (a checkpoint is useless with a different word order)."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from envs.vln_vocab import Vocab
from models.envdrop import Follower, FollowerSize
from models.speaker import Speaker, SpeakerSize


def save(path: str | Path, model: Follower | Speaker, vocab: Vocab | None, **extra) -> None:
    """`vocab` None: a federated server's model, whose vocabulary lives with the houses."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"kind": type(model).__name__, "size": asdict(model.size),
                "vocab": None if vocab is None else vocab.words, "state": model.state_dict(), **extra}, tmp)
    tmp.replace(path)


def load(path: str | Path) -> tuple[Follower | Speaker, Vocab | None, dict]:
    """(model, vocab or None, the checkpoint's other entries)."""
    ck = torch.load(path, map_location="cpu", weights_only=False)
    kinds = {"Follower": (Follower, FollowerSize), "Speaker": (Speaker, SpeakerSize)}
    cls, size = kinds[ck["kind"]]
    model = cls(size(**ck["size"]))
    model.load_state_dict(ck["state"])
    extra = {k: v for k, v in ck.items() if k not in ("kind", "size", "vocab", "state")}
    return model, None if ck["vocab"] is None else Vocab(ck["vocab"]), extra
