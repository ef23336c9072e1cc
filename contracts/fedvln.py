"""FedVLN's contract between server and houses: model sizes, which part of the follower each
stage shares, and how a model's shared part is cut out (paper Sec. 4: fed-lan shares only the
language encoder in pre-exploration)."""

from __future__ import annotations

from flwr.app import ArrayRecord

from config import Config
from models.envdrop import FollowerSize
from models.speaker import SpeakerSize

LANG = "lang_encoder."  # the follower's language encoder (fed-lan shares only this)
# train config: the roles whose houses hold the stage's setup (comma-separated), so a house
# whose setup is gone (a resumed stage, its saved state lost) refuses instead of training
# without the speaker's routes or its own follower
SPEAKER_TO = "speaker-to"
FOLLOWER_TO = "follower-to"
# What keeps a speaker checkpoint, federated and centralized: the pooled val_seen route
# fidelity (envs/vln_fidelity.py). The paper keeps the best val_unseen BLEU
# (`best_val_unseen_bleu`); on the embedded houses a constant sentence reaches a trained
# speaker's BLEU and the BLEU-best checkpoint was the most template-like one (issue 41).
# val_seen, so the split the tables report (val_unseen) does not choose the checkpoint.
SPEAKER_SELECTION = "val_seen_fidelity"


def follower_size(c: Config, vocab: int, feature: int) -> FollowerSize:
    return FollowerSize(vocab, feature, c.fedvln.embedding, c.fedvln.hidden)


def speaker_size(c: Config, vocab: int, feature: int) -> SpeakerSize:
    return SpeakerSize(
        vocab, feature, c.fedvln.embedding, c.fedvln.hidden,
        word_dropout=c.fedvln.speaker_word_dropout,
    )  # fmt: skip


def stage_share(c: Config) -> str:
    """What the run's stage and variant share: fed-lan the language encoder, env-based
    nothing, otherwise the whole model ("*")."""
    if c.fedvln.stage == "preexplore":
        variant = c.fedvln.variant
        return "" if variant == "env-based" else LANG if variant.startswith("fed-lan") else "*"
    return "*"


def shared_part(model, share: str) -> ArrayRecord:
    """The arrays of `model` under the comma-separated prefixes `share` ("*": all)."""
    state = model.state_dict()
    if share == "*":
        return ArrayRecord(state)
    prefixes = tuple(p for p in share.split(",") if p)
    return ArrayRecord({k: v for k, v in state.items() if prefixes and k.startswith(prefixes)})
