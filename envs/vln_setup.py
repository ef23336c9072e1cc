"""One entry point to a VLN data source (no flwr): the embedded houses by default, or a folder
in the real R2R/Matterport layout (`../shared/data`), with its world, vocabulary and splits."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envs.vln_data import Episode, VLNData
from envs.vln_env import World
from envs.vln_houses import HouseSpec, embedded_dataset
from envs.vln_vocab import Vocab


@dataclass
class VLNSetup:
    data: VLNData
    world: World
    vocab: Vocab
    source: str

    def split(self, name: str) -> list[Episode]:
        return self.data.episodes(name)


def open_vln(
    data_dir: str | Path = "",
    features_tsv: str = "",
    spec: HouseSpec = HouseSpec(),
    appearance: float = 0.0,
) -> VLNSetup:
    """`data_dir` "" means the embedded houses of `spec`. The vocabulary is the folder's
    `r2r/train_vocab.txt` when present (R2R's), else built from the train split with R2R's
    min count of 5. `appearance`: each house's look added to the semantic view features
    (envs/vln_appearance.py; 0 = off)."""
    root = Path(data_dir) if data_dir else embedded_dataset(spec)
    data = VLNData(root)
    vf = data.vocab_file()
    vocab = Vocab.read(vf) if vf else Vocab.build(e.instruction for e in data.episodes("train"))
    source = str(data_dir) if data_dir else f"embedded houses {spec}"
    return VLNSetup(data, World(data, features_tsv, appearance), vocab, source)
