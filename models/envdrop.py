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


class Dropout(nn.Module):
    """nn.Dropout's inverted dropout (each element zeroed with probability p, the rest scaled by
    1/(1-p)), its keep mask drawn as `uniform >= p`. nn.Dropout draws with `bernoulli_`, which
    on CPU costs ~5x more per element; a follower update draws ~0.7M (the instruction's
    embedding and context, both halves of the mixed rollout) plus three small masks per
    decoding step (experiments/fedvln/update_speed.py times it). Same distribution, another
    random stream than nn.Dropout's."""

    def __init__(self, p: float):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.p == 1.0:
            return x * 0.0
        keep = (torch.rand_like(x) >= self.p).to(x.dtype).mul_(1.0 / (1.0 - self.p))
        return x * keep

    def extra_repr(self) -> str:
        return f"p={self.p}"


class SoftDotAttention(nn.Module):
    """Luong attention: weights = softmax(ctx . W h); returns (mixed, weights, raw logits).

    Both products are a broadcast multiply and a sum rather than batched `bmm`: with one query
    per row and short contexts (36 views, <= 80 words) that is faster on CPU
    (experiments/fedvln/update_speed.py measures it) and computes the same values."""

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


def packed_bilstm(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor):
    """`lstm` (one bidirectional layer, batch_first) over the padded batch `x` (N, T, E) with
    each row's `lengths`, as `lstm(pack_padded_sequence(x, lengths))` followed by
    `pad_packed_sequence` computes it: returns (outputs (N, T, 2H), zero past each row's end;
    h_n (2, N, H); c_n (2, N, H)), each direction's state at the row's own last token.

    Why not nn.LSTM on a PackedSequence: on CPU it projects every token's input in one matrix
    product and then slices that (tokens, 4H) tensor once per step, and autograd answers each
    slice with a zero-filled tensor of the full size, so its backward grows with steps x tokens
    (a quarter of a follower update at batch 2 x 32, `aten::fill_` in a profile). Here each
    step is one `lstm_cell` on the rows still running (rows sorted by length, so they are a
    prefix), the same parameters and values (tests/test_vln_models.py checks outputs, states
    and gradients against nn.LSTM)."""
    n_rows, steps, _ = x.shape
    hidden = lstm.hidden_size
    lengths = lengths.cpu()  # as pack_padded_sequence: lengths on the CPU, indices with x
    order = torch.argsort(lengths, descending=True, stable=True)
    lengths_sorted = lengths[order]
    order = order.to(x.device)
    xs = x[order].unbind(1)
    longest = int(lengths_sorted[0])
    running = [int((lengths_sorted > t).sum()) for t in range(longest)]
    p = dict(lstm.named_parameters())

    def direction(suffix: str, reverse: bool):
        weights = [p[f"{k}_l0{suffix}"] for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        outs = [None] * longest
        if reverse:  # from each row's last token back to its first: rows join as t falls
            h = c = x.new_zeros(0, hidden)
            for t in range(longest - 1, -1, -1):
                if running[t] > len(h):
                    z = x.new_zeros(running[t] - len(h), hidden)
                    h, c = torch.cat([h, z]), torch.cat([c, z])
                h, c = torch._VF.lstm_cell(xs[t][: running[t]], (h, c), *weights)
                outs[t] = h
            return outs, h, c
        h = c = x.new_zeros(n_rows, hidden)
        ended_h, ended_c = [], []  # the state of rows whose last token has passed, longest last
        for t in range(longest):
            if running[t] < len(h):
                ended_h.append(h[running[t] :])
                ended_c.append(c[running[t] :])
                h, c = h[: running[t]], c[: running[t]]
            h, c = torch._VF.lstm_cell(xs[t][: running[t]], (h, c), *weights)
            outs[t] = h
        return outs, torch.cat([h, *ended_h[::-1]]), torch.cat([c, *ended_c[::-1]])

    fwd, h_f, c_f = direction("", False)
    bwd, h_b, c_b = direction("_reverse", True)
    data = torch.cat([torch.cat([a, b], 1) for a, b in zip(fwd, bwd)])
    unsort = torch.argsort(order)
    packed = nn.utils.rnn.PackedSequence(data, torch.tensor(running), order, unsort)
    out, _ = nn.utils.rnn.pad_packed_sequence(packed, batch_first=True, total_length=steps)
    return out, torch.stack([h_f[unsort], h_b[unsort]]), torch.stack([c_f[unsort], c_b[unsort]])


class LangEncoder(nn.Module):
    """Word embedding -> Bi-LSTM -> context per token, plus the decoder's initial (h, c)."""

    @builds_holding_the_generator
    def __init__(self, s: FollowerSize):
        super().__init__()
        self.embedding = nn.Embedding(s.vocab, s.embedding, padding_idx=0)
        self.lstm = nn.LSTM(s.embedding, s.hidden // 2, batch_first=True, bidirectional=True)
        self.drop = Dropout(s.dropout)
        self.to_state = nn.Linear(s.hidden, s.hidden)

    def forward(self, tokens: torch.Tensor):
        mask = tokens != 0
        lengths = mask.sum(1).clamp(min=1).cpu()
        ctx, h, c = packed_bilstm(self.lstm, self.drop(self.embedding(tokens)), lengths)
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
        self.drop = Dropout(s.dropout)

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
            Dropout(size.dropout),
            nn.Linear(size.hidden, 1),
        )
        self.feat_drop = Dropout(size.feature_dropout)

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
