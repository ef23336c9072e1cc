"""TextCNN Q-networks of the FedRL Text2Action experiments (paper Sec. 5.2; EASDRL's network).

The paper: "Four convolutional layers corresponding to bigram, tri-gram, four-gram and five-gram
with 32 kernels of size n x m ... max-pooling ... two fully connected layers with size 128 x 2";
the reference (FRL2019/FRL text2action/EADQN.py `build_nn`): each n-gram convolution spans the
whole feature width (a 1-D convolution over words), ReLU, max-pooled over all positions, the four
concatenated (4 x 32), a 128-unit ReLU layer, then one Q per action (select, neglect).

The input rows are a party's own features of each word, next to the word's tag:
- alpha (`PosFeatures`): a 50-d part-of-speech embedding, trained with the Q-network (the
  reference's `pos_emb`);
- beta (`WordFeatures`): the 50-d word vector, fixed (envs/word_vectors.py);
- DQN-full / FCN-full (`FullFeatures`): both, [word vector | POS embedding].
The tag is the reference's fixed tag embedding: tag i (0 untagged, 1 neglected, 2 selected)
becomes a 50-d vector of i's. An observation is [text id, tags...] (envs/text2action.py); the
per-text tables are buffers that are not saved (each party rebuilds them from its own data).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from models.rng import builds_holding_the_generator

DIM = 50
NGRAMS = (2, 3, 4, 5)


class PosFeatures(nn.Module):
    @builds_holding_the_generator
    def __init__(self, pos_ids: np.ndarray, n_pos: int, dim: int = DIM):
        super().__init__()
        self.register_buffer("table", torch.as_tensor(pos_ids, dtype=torch.long), persistent=False)
        self.emb = nn.Embedding(n_pos, dim)
        self.width = dim

    def forward(self, texts: torch.Tensor) -> torch.Tensor:
        return self.emb(self.table[texts])


class WordFeatures(nn.Module):
    @builds_holding_the_generator
    def __init__(self, vectors: np.ndarray):
        super().__init__()
        self.register_buffer(
            "table", torch.as_tensor(vectors, dtype=torch.float32), persistent=False
        )
        self.width = vectors.shape[-1]

    def forward(self, texts: torch.Tensor) -> torch.Tensor:
        return self.table[texts]


class FullFeatures(nn.Module):
    @builds_holding_the_generator
    def __init__(self, word: WordFeatures, pos: PosFeatures):
        super().__init__()
        self.word, self.pos = word, pos
        self.width = word.width + pos.width

    def forward(self, texts: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.word(texts), self.pos(texts)], -1)


class TextCNN(nn.Module):
    @builds_holding_the_generator
    def __init__(
        self, features: nn.Module, n_actions: int = 2, filters: int = 32, tag_dim: int = DIM
    ):
        super().__init__()
        self.features, self.tag_dim = features, tag_dim
        width = features.width + tag_dim
        self.convs = nn.ModuleList(nn.Conv1d(width, filters, n) for n in NGRAMS)
        self.fc = nn.Linear(len(NGRAMS) * filters, len(NGRAMS) * filters)
        self.out = nn.Linear(len(NGRAMS) * filters, n_actions)

    def forward(self, obs: torch.Tensor, obs_beta: torch.Tensor | None = None) -> torch.Tensor:
        """Q per action. `obs_beta` (the full network's second input, as FullQNet's) names the
        same text and tags as `obs` in Text2Action, so it is not read."""
        obs = torch.as_tensor(obs).long()
        texts, tags = obs[:, 0], obs[:, 1:]
        tag_rows = tags.float()[..., None].expand(-1, -1, self.tag_dim)
        x = torch.cat([self.features(texts), tag_rows], -1).transpose(1, 2)
        pooled = [torch.relu(conv(x)).amax(-1) for conv in self.convs]
        return self.out(torch.relu(self.fc(torch.cat(pooled, 1))))
