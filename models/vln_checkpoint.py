"""Save and reload a follower or speaker with what is needed to rebuild it: its sizes and the
vocabulary it was trained with (a checkpoint is useless with a different word order).

A checkpoint holds only tensors and plain values (numbers, strings, lists, dicts), and is read
with `torch.load(weights_only=True)`: a file handed to `fedvln.agent-init` cannot run code."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from envs.errors import DataError
from envs.vln_vocab import Vocab
from models.envdrop import Follower, FollowerSize
from models.speaker import Speaker, SpeakerSize


def save(path: str | Path, model: Follower | Speaker, vocab: Vocab | None, **extra) -> None:
    """`vocab` None: a federated server's model, whose vocabulary lives with the houses."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(
        {
            "kind": type(model).__name__,
            "size": asdict(model.size),
            "vocab": None if vocab is None else list(vocab.words),
            "state": model.state_dict(),
            **_plain(extra),
        },
        tmp,
    )
    tmp.replace(path)


def _plain(v):
    """numpy scalars and tuples as Python numbers and lists (what weights_only can read)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v.item() if hasattr(v, "item") and not isinstance(v, torch.Tensor) else v


def load(path: str | Path) -> tuple[Follower | Speaker, Vocab | None, dict]:
    """(model, vocab or None, the checkpoint's other entries)."""
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise DataError(f"{path}: checkpoint not found") from None
    except Exception as e:  # pickle refusing a global, a truncated or foreign file, ...
        raise DataError(
            f"{path}: not a follower/speaker checkpoint that loads without running "
            f"code ({type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]})"
        ) from None
    kinds = {"Follower": (Follower, FollowerSize), "Speaker": (Speaker, SpeakerSize)}
    if (
        not isinstance(ck, dict)
        or ck.get("kind") not in kinds
        or not isinstance(ck.get("size"), dict)
        or "state" not in ck
    ):
        raise DataError(
            f"{path}: not a follower/speaker checkpoint (needs 'kind', 'size', 'state')"
        )
    cls, size = kinds[ck["kind"]]
    if ck["kind"] == "Speaker" and "step_skip" not in ck["size"]:  # saved before issue 41
        ck["size"].update(step_skip=False, word_dropout=0.0)
    try:
        model = cls(size(**ck["size"]))
        model.load_state_dict(ck["state"])
    except (TypeError, RuntimeError) as e:
        raise DataError(
            f"{path}: {ck['kind']} checkpoint does not fit its own sizes "
            f"({str(e).splitlines()[0][:160]})"
        ) from None
    extra = {k: v for k, v in ck.items() if k not in ("kind", "size", "vocab", "state")}
    return model, None if ck["vocab"] is None else Vocab(ck["vocab"]), extra
