"""The Envdrop speaker: writes an instruction for a trajectory (Fried et al. 2018; Tan et al.
2019).

Encoder: an LSTM over the features of the actions taken; at each step its state attends over
that viewpoint's panorama, and a second LSTM runs over [attended panorama, first state] to give
one context vector per step. Decoder: word embedding -> LSTM -> attention over the step
contexts -> vocabulary logits. Trained by teacher forcing (cross-entropy); decoded greedily
for evaluation (BLEU) and greedily or by sampling for augmentation. Environmental dropout is
applied to the visual part of the inputs as in the follower.

Grounding (issue 41). Trained exactly so, the speaker wrote nearly one sentence for every route
on the embedded houses: teacher forcing lets the decoder's own language model predict the
instruction grammar's template from the previous words, the cross-entropy gain of naming the
route's rooms is a few tokens per instruction, and the decoder never learned to use the route
(zeroing every room and object feature left its room words unchanged; route fidelity at the
constant sentence's level). One addition, a documented departure from the official speaker
(eric-ai-lab/FedVLN r2r_src/model.py l. 207-301), fixes it at that cause:

- `step_skip`: each step's context also gets a linear map of that step's panorama, the visual
  part's mean and largest magnitude over the 36 views (its room, the rooms seen through doors,
  the objects in view: one object in one view survives the max where the mean dilutes it
  36-fold), so what is at step t is linearly in context t and attention can find it, rather
  than only through two LSTMs whose input the 128-d angle encoding dominates.
- `word_dropout` (off by default): during teacher forcing each input word (not <BOS>) is
  replaced by <UNK> with this probability (Bowman et al. 2016, "Generating sentences from a
  continuous space", Sec. 3.2), so the previous words cannot determine the next one. It went in
  with an earlier skip (one view), with which only the two together grounded the speaker.

Measured on the embedded houses, val_unseen, kept checkpoint, 3 seeds, strict route fidelity
/ stop object / teaching against a constant sentence (`python -m experiments.study
experiments/studies/fedvln_speaker_ablation.toml`, docs/fedvln.md "Ablation"):
official 42.9 / 5.8 / 0.53 (one seed of three grounded); word dropout alone 67.3 / 22.1 /
0.46; the skip alone 73.8 / 31.2 / 0.53; skip + word dropout 0.25 75.3 / 42.7 / 0.56. Either
grounds the speaker; the skip grounds it further, and word dropout on top names more stop
objects (+11.5, every seed) with no measurable change in teaching at 3 seeds.

Federated, word dropout is what grounds the FedAvg speaker round (issue 64 item 1): without
it the average of six houses' speakers stays on the template for 40-120 rounds; with 0.25 it
leaves it in every seed (experiments/studies/fedvln_speaker_word_dropout.toml). So the
federated stage's default is 0.25 (`fedvln.speaker-word-dropout`). `SpeakerSize`'s default,
which the centralized speaker study (experiments/fedvln/centralized.py) uses, stays 0 until
that study and the tables from its speaker are re-made with it; the pipeline gives its
centralized speaker the federated stage's value, so the two speakers it compares are one model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from envs.vln_features import ANGLE_DIM
from envs.vln_vocab import EOS, PAD, UNK
from models.envdrop import SoftDotAttention
from models.rng import builds_holding_the_generator


@dataclass(frozen=True)
class SpeakerSize:
    vocab: int
    feature: int
    embedding: int = 64
    hidden: int = 128
    dropout: float = 0.3
    feature_dropout: float = 0.3
    word_dropout: float = 0.0  # teacher-forced input words -> <UNK> (module docstring)
    step_skip: bool = True  # each step's panorama, linearly, into its context (docstring)


class Speaker(nn.Module):
    @builds_holding_the_generator
    def __init__(self, s: SpeakerSize):
        super().__init__()
        self.size = s
        self.feat_drop = nn.Dropout(s.feature_dropout)
        self.action_lstm = nn.LSTM(s.feature, s.hidden, batch_first=True)
        self.pano_attn = SoftDotAttention(s.hidden, s.feature, output=False)
        self.post_lstm = nn.LSTM(s.feature + s.hidden, s.hidden, batch_first=True)
        self.embedding = nn.Embedding(s.vocab, s.embedding, padding_idx=PAD)
        self.dec_lstm = nn.LSTM(s.embedding, s.hidden, batch_first=True)
        self.ctx_attn = SoftDotAttention(s.hidden, s.hidden)
        self.drop = nn.Dropout(s.dropout)
        self.out = nn.Linear(s.hidden, s.vocab)
        visual = s.feature - ANGLE_DIM
        self.step_visual = nn.Linear(2 * visual, s.hidden) if s.step_skip else None

    def _drop_visual(self, x, mask):
        visual = self.size.feature - ANGLE_DIM
        return torch.cat([x[..., :visual] * mask, x[..., visual:]], -1)

    def encode(self, actions, panos, step_mask, feature_mask=None):
        """actions (B, T, F), panos (B, T, 36, F), step_mask (B, T) -> ctx (B, T, H), (h, c).
        `feature_mask` (B, 1, visual dims) replaces the speaker's own environmental dropout:
        back-translation shows the speaker the follower's dropped-out environment."""
        B, T, _ = actions.shape
        mask = (
            feature_mask
            if feature_mask is not None
            else self.feat_drop(
                torch.ones(B, 1, self.size.feature - ANGLE_DIM, device=actions.device)
            )
        )
        actions = self._drop_visual(actions, mask)
        panos = self._drop_visual(panos, mask.unsqueeze(1))
        h, _ = self.action_lstm(actions)
        mixed, _, _ = self.pano_attn(h.reshape(B * T, -1), panos.reshape(B * T, 36, -1))
        x = torch.cat([mixed.view(B, T, -1), h], -1)
        lengths = step_mask.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(
            self.drop(x), lengths, batch_first=True, enforce_sorted=False
        )
        out, (hn, cn) = self.post_lstm(packed)
        ctx, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=T)
        if self.step_visual is not None:
            view = panos[..., : self.size.feature - ANGLE_DIM]  # (B, T, 36, visual)
            ctx = ctx + self.step_visual(torch.cat([view.mean(2), view.abs().amax(2)], -1))
        return self.drop(ctx), (hn, cn)

    def decode(self, words, ctx, step_mask, state):
        """Teacher-forced logits (B, L, V) for input words (B, L) and the LSTM state after."""
        emb = self.drop(self.embedding(words))
        h, state = self.dec_lstm(emb, state)
        B, L, H = h.shape
        ctx_rep = ctx.unsqueeze(1).expand(B, L, *ctx.shape[1:]).reshape(B * L, *ctx.shape[1:])
        mask_rep = step_mask.unsqueeze(1).expand(B, L, -1).reshape(B * L, -1)
        mixed, _, _ = self.ctx_attn(h.reshape(B * L, H), ctx_rep, mask_rep)
        return self.out(self.drop(mixed)).view(B, L, -1), state

    def loss(self, actions, panos, step_mask, tokens):
        """Mean cross-entropy of tokens[:, 1:] given tokens[:, :-1] (PAD ignored); in training
        mode the input words go through word dropout (module docstring)."""
        ctx, state = self.encode(actions, panos, step_mask)
        words = tokens[:, :-1]
        if self.training and self.size.word_dropout > 0:
            hit = torch.rand(words.shape, device=words.device) < self.size.word_dropout
            words = words.masked_fill(hit & (words != PAD) & (words != tokens[:, :1]), UNK)
        logits, _ = self.decode(words, ctx, step_mask, state)
        return nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1), ignore_index=PAD
        )

    @torch.no_grad()
    def generate(
        self,
        actions,
        panos,
        step_mask,
        bos: int,
        max_len: int = 80,
        sample: bool = False,
        generator: torch.Generator | None = None,
        feature_mask: torch.Tensor | None = None,
    ):
        """(B, <= max_len) token ids, starting after <BOS>, PAD after each <EOS>."""
        ctx, state = self.encode(actions, panos, step_mask, feature_mask)
        B = actions.shape[0]
        word = torch.full((B, 1), bos, dtype=torch.long, device=actions.device)
        out, finished = [], torch.zeros(B, dtype=torch.bool, device=actions.device)
        for _ in range(max_len):
            logits, state = self.decode(word, ctx, step_mask, state)
            logits = logits[:, -1]
            logits[:, PAD] = float("-inf")
            if sample:
                word = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)
            else:
                word = logits.argmax(-1, keepdim=True)
            word = word.masked_fill(finished.unsqueeze(1), PAD)
            out.append(word)
            finished |= word.squeeze(1) == EOS
            if finished.all():
                break
        return torch.cat(out, 1)
