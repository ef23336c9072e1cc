"""The Envdrop follower (Tan et al. 2019): language encoder, attentive LSTM decoder, critic.

Parameter names are grouped by submodule so federation can pick a part by prefix:
`lang_encoder.` (embedding + Bi-LSTM + projection: FedVLN's E_L, the only part shared in
fed-lan pre-exploration), `decoder.` (trajectory encoder and decision module, E_T and M) and
`critic.` (the A2C value head). The paper's sizes are embedding 256 and a Bi-LSTM of 2 x 256;
the defaults here are smaller for CPU training.

Environmental dropout: one dropout mask over the visual feature dimensions per episode, held
for every view and every step of the episode (Envdrop's "same dropout mask over an
environment"), applied to the panorama and candidate features but not to their angle parts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from envs.vln_features import ANGLE_DIM
from models.rng import builds_holding_the_generator

PREFIXES = ("lang_encoder.", "decoder.", "critic.")


@dataclass(frozen=True)
class FollowerSize:
    vocab: int
    feature: int  # view feature + 128 angle
    embedding: int = 64
    hidden: int = 128  # Bi-LSTM output (2 x hidden/2) and decoder state
    action_embedding: int = 32
    dropout: float = 0.5
    feature_dropout: float = 0.3


class SoftDotAttention(nn.Module):
    """Luong attention: weights = softmax(ctx . W h); returns (mixed, weights, raw logits).

    Both products are a broadcast multiply and a sum rather than batched `bmm`: with one query
    per row and short contexts (36 views, <= 80 words) that is faster on CPU
    (experiments/vln_update_speed.py measures it) and computes the same values."""

    @builds_holding_the_generator
    def __init__(self, query_dim: int, ctx_dim: int, output: bool = True):
        super().__init__()
        self.linear_in = nn.Linear(query_dim, ctx_dim, bias=False)
        self.linear_out = nn.Linear(query_dim + ctx_dim, query_dim, bias=False) if output else None

    def forward(self, h, ctx, mask=None):
        logit = (ctx * self.linear_in(h).unsqueeze(1)).sum(2)
        if mask is not None:
            logit = logit.masked_fill(~mask, float("-inf"))
        attn = torch.softmax(logit, dim=1)
        weighted = (attn.unsqueeze(2) * ctx).sum(1)
        if self.linear_out is None:
            return weighted, attn, logit
        return torch.tanh(self.linear_out(torch.cat([weighted, h], 1))), attn, logit


class LangEncoder(nn.Module):
    """Word embedding -> Bi-LSTM -> context per token, plus the decoder's initial (h, c)."""

    @builds_holding_the_generator
    def __init__(self, s: FollowerSize):
        super().__init__()
        self.embedding = nn.Embedding(s.vocab, s.embedding, padding_idx=0)
        self.lstm = nn.LSTM(s.embedding, s.hidden // 2, batch_first=True, bidirectional=True)
        self.drop = nn.Dropout(s.dropout)
        self.to_state = nn.Linear(s.hidden, s.hidden)

    def forward(self, tokens: torch.Tensor):
        mask = tokens != 0
        lengths = mask.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(
            self.drop(self.embedding(tokens)), lengths, batch_first=True, enforce_sorted=False
        )
        out, (h, c) = self.lstm(packed)
        ctx, _ = nn.utils.rnn.pad_packed_sequence(
            out, batch_first=True, total_length=tokens.shape[1]
        )
        h0 = torch.tanh(self.to_state(torch.cat([h[-2], h[-1]], 1)))
        c0 = torch.cat([c[-2], c[-1]], 1)
        return self.drop(ctx), mask, h0, c0


class ActionDecoder(nn.Module):
    """One step: embed the previous action's direction, attend over the panorama, LSTM cell,
    attend over the instruction, score the candidates (STOP is candidate 0)."""

    @builds_holding_the_generator
    def __init__(self, s: FollowerSize):
        super().__init__()
        self.action_embed = nn.Sequential(nn.Linear(ANGLE_DIM, s.action_embedding), nn.Tanh())
        self.feat_attn = SoftDotAttention(s.hidden, s.feature, output=False)
        self.cell = nn.LSTMCell(s.action_embedding + s.feature, s.hidden)
        self.lang_attn = SoftDotAttention(s.hidden, s.hidden)
        self.cand_attn = SoftDotAttention(s.hidden, s.feature, output=False)
        self.drop = nn.Dropout(s.dropout)

    def forward(self, prev_angle, pano, cand, cand_mask, h, c, ctx, ctx_mask):
        pano_mixed, _, _ = self.feat_attn(self.drop(h), pano)
        h, c = self.cell(torch.cat([self.action_embed(prev_angle), pano_mixed], 1), (h, c))
        h_tilde, _, _ = self.lang_attn(self.drop(h), ctx, ctx_mask)
        _, _, logit = self.cand_attn(self.drop(h_tilde), cand, cand_mask)
        return logit, h, c, h_tilde


class Follower(nn.Module):
    @builds_holding_the_generator
    def __init__(self, size: FollowerSize):
        super().__init__()
        self.size = size
        self.lang_encoder = LangEncoder(size)
        self.decoder = ActionDecoder(size)
        self.critic = nn.Sequential(
            nn.Linear(size.hidden, size.hidden),
            nn.ReLU(),
            nn.Dropout(size.dropout),
            nn.Linear(size.hidden, 1),
        )
        self.feat_drop = nn.Dropout(size.feature_dropout)

    def env_drop_mask(self, batch: int, device) -> torch.Tensor:
        """(B, 1, visual dims) mask, 1/(1-p)-scaled; all ones in eval mode."""
        visual = self.size.feature - ANGLE_DIM
        return self.feat_drop(torch.ones(batch, 1, visual, device=device))

    @staticmethod
    def apply_mask(feats: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        visual = mask.shape[-1]
        return torch.cat([feats[..., :visual] * mask, feats[..., visual:]], -1)


def parameter_share(model: nn.Module, prefix: str) -> float:
    """Fraction of the model's parameters whose name starts with `prefix`."""
    total = sum(p.numel() for p in model.parameters())
    part = sum(p.numel() for n, p in model.named_parameters() if n.startswith(prefix))
    return part / total
