"""Speed of one FedVLN follower update (Envdrop's mixed objective, batch 32) on this CPU:
today's code against faster variants, in the same run.

    python -m experiments.fedvln.update_speed [--updates 20] [--batch 32] [--compile]

Variants, each timed on the same batches from the embedded houses after 3 warm-up updates, one
thread unless said, interleaved `--repeats` times (the median is kept):
  bmm attention, two rollouts     the earliest attention (SoftDotAttention with torch.bmm)
  multiply-sum attention, two rollouts (before)
                                  models/envdrop.py's attention (same values, checked here); the
                                  mixed objective as two rollouts of training/vln_agent.rollout
  ... both rollouts in one batch  training/vln_agent.mixed_rollout: the imitation and the A2C
                                  rollouts of one update decoded as one batch of 2B rows
                                  (same losses as two rollouts, checked here)
  ... dropout drawn uniform       models/envdrop.Dropout in place of nn.Dropout's bernoulli_
                                  (same distribution, another random stream)
  ... encoder step by step (now)  models/envdrop.packed_bilstm in place of nn.LSTM on a
                                  PackedSequence (same values and gradients, checked here)
  ... now, 2 threads              client-threads=2: only worth it where a core is free (a run
                                  with one ClientApp per core has none)
  ... now, compiled decoder       torch.compile of the per-step decoder (--compile; needs a C++
                                  compiler, and pays its compile time once per process)

The first change of issue 18 (the rollout decodes only the episodes still running, 1.11x) was
timed against a copy of the rollout as it was, every row decoded until the longest episode
ends. That copy is gone (issue 66: a fork of the rollout does not follow fixes to the real one);
it and the run that measured 1.54x against it are in git at commit 3a56fb1
(experiments/fedvln/update_speed.py, experiments/results/vln_update_speed.csv), and
docs/performance.md keeps those numbers as history. Every variant here runs today's rollout.
Writes experiments/results/vln_update_speed.csv: updates/s and the ratio to the (before) row.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pandas as pd
import torch

from experiments.simulate import RESULTS, command_line, machine_label


def bmm_forward(self, h, ctx, mask=None):
    """SoftDotAttention.forward as it was (batched matrix products)."""
    logit = torch.bmm(ctx, self.linear_in(h).unsqueeze(2)).squeeze(2)
    if mask is not None:
        logit = logit.masked_fill(~mask, float("-inf"))
    attn = torch.softmax(logit, dim=1)
    weighted = torch.bmm(attn.unsqueeze(1), ctx).squeeze(1)
    if self.linear_out is None:
        return weighted, attn, logit
    return torch.tanh(self.linear_out(torch.cat([weighted, h], 1))), attn, logit


def nn_lstm_bilstm(lstm, x: torch.Tensor, lengths: torch.Tensor):
    """models/envdrop.packed_bilstm as it was: nn.LSTM on a PackedSequence."""
    from torch import nn

    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, (h, c) = lstm(packed)
    out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return out, h, c


def with_torch_dropout(model):
    """The follower as it was: nn.Dropout (bernoulli_) wherever models/envdrop.Dropout is."""
    from torch import nn

    from models.envdrop import Dropout

    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, Dropout):
                setattr(module, name, nn.Dropout(child.p))
    return model


def two_rollouts(roll):
    """The mixed objective as two rollouts of `roll` (imitation, then A2C), as it was before
    training/vln_agent.mixed_rollout decoded both in one batch."""

    def mixed(model, world, episodes, tokens, s, *, token_ids=None, drop=None):
        kw = {"token_ids": token_ids, "drop": drop}
        teacher, _ = roll(model, world, episodes, tokens, "teacher", s, **kw)
        rl, _ = roll(model, world, episodes, tokens, "sample", s, **kw)
        return teacher, rl

    return mixed


def time_updates(
    vln, updates: int, batch: int, threads: int, compiled: bool, torch_dropout: bool
) -> float:
    from models.envdrop import Follower, FollowerSize
    from training import vln_agent

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Follower(FollowerSize(len(vln.vocab), vln.world.feature_dim))
    if torch_dropout:
        model = with_torch_dropout(model)
    if compiled:
        model.decoder = torch.compile(model.decoder)
    s = vln_agent.AgentSettings(batch_size=batch)
    tokens = vln_agent.Tokens(vln.vocab, s.max_words)
    opt = torch.optim.RMSprop(model.parameters(), lr=s.lr)
    eps = vln.split("train")
    vln_agent.train_batches(
        model, opt, vln.world, eps, tokens, s, iterations=3, rng=np.random.default_rng(0)
    )
    t0 = time.perf_counter()
    vln_agent.train_batches(
        model, opt, vln.world, eps, tokens, s, iterations=updates, rng=np.random.default_rng(1)
    )
    return updates / (time.perf_counter() - t0)


def same_rollouts(vln, batch: int) -> bool:
    """The one-batch mixed rollout gives two rollouts' teacher and A2C losses (eval mode, so no
    dropout draws differ; sampling made the argmax, so no action draws differ)."""
    from unittest import mock

    from models.envdrop import Follower, FollowerSize
    from training import vln_agent

    torch.manual_seed(0)
    model = Follower(FollowerSize(len(vln.vocab), vln.world.feature_dim)).eval()
    s = vln_agent.AgentSettings(batch_size=batch)
    tokens = vln_agent.Tokens(vln.vocab, s.max_words)
    eps = vln.split("train")[:batch]
    argmax = mock.patch.object(
        torch.distributions.Categorical, "sample", lambda d, shape=(): d.logits.argmax(-1)
    )
    with torch.no_grad(), argmax:
        teacher, _ = vln_agent.rollout(model, vln.world, eps, tokens, "teacher", s)
        a2c, _ = vln_agent.rollout(model, vln.world, eps, tokens, "sample", s)
        joint = vln_agent.mixed_rollout(model, vln.world, eps, tokens, s)
    return torch.allclose(joint[0], teacher, rtol=1e-5) and torch.allclose(joint[1], a2c, rtol=1e-5)


def same_encoder(vln, batch: int) -> bool:
    """The step-by-step encoder gives nn.LSTM-on-a-PackedSequence's context, initial state and
    gradients (eval mode: no dropout draws)."""
    from models import envdrop
    from training import vln_agent

    torch.manual_seed(0)
    size = envdrop.FollowerSize(len(vln.vocab), vln.world.feature_dim)
    enc = envdrop.Follower(size).lang_encoder.eval()
    ids = vln_agent.Tokens(vln.vocab, 80)(vln.split("train")[: 2 * batch])
    got, step_by_step = [], envdrop.packed_bilstm
    for bilstm in (nn_lstm_bilstm, step_by_step):
        envdrop.packed_bilstm = bilstm
        enc.zero_grad()
        ctx, _, h, c = enc(ids)
        (ctx.square().sum() + h.sum() + 2 * c.sum()).backward()
        got.append([ctx, h, c, *(p.grad.clone() for p in enc.parameters())])
    envdrop.packed_bilstm = step_by_step
    # float sums in another order: equal to 1e-5 of each tensor's largest entry
    return all(
        (a - b).abs().max() <= 1e-5 * a.abs().max() + 1e-7 for a, b in zip(*got, strict=True)
    )


def same_values() -> bool:
    from models.envdrop import SoftDotAttention

    torch.manual_seed(0)
    att = SoftDotAttention(16, 24)
    h, ctx = torch.randn(5, 16), torch.randn(5, 7, 24)
    mask = torch.rand(5, 7) > 0.2
    mask[:, 0] = True
    return all(
        torch.allclose(a, b, atol=1e-6)
        for a, b in zip(att(h, ctx, mask), bmm_forward(att, h, ctx, mask))
    )


def main(argv=None) -> int:
    from envs.vln_setup import open_vln
    from models import envdrop
    from models.envdrop import SoftDotAttention
    from training import vln_agent

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--compile", action="store_true", help="also time a compiled decoder")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved timings (median kept)")
    args = ap.parse_args(argv)
    cmd = command_line(__file__, argv)
    if not same_values():
        print("vln_update_speed: multiply-sum attention differs from bmm", file=sys.stderr)
        return 1
    vln = open_vln("")
    if not same_rollouts(vln, args.batch):
        print("vln_update_speed: the one-batch rollout differs", file=sys.stderr)
        return 1
    if not same_encoder(vln, args.batch):
        print("vln_update_speed: the step-by-step encoder differs", file=sys.stderr)
        return 1
    new_forward, joint = SoftDotAttention.forward, vln_agent.mixed_rollout
    step_by_step = envdrop.packed_bilstm
    two = two_rollouts(vln_agent.rollout)
    old, new = (nn_lstm_bilstm, True), (step_by_step, False)  # (bi-LSTM, nn.Dropout)
    variants = [  # (name, attention, mixed objective's rollouts, (bi-LSTM, nn.Dropout), threads)
        ("bmm attention, two rollouts", bmm_forward, two, old, 1),
        ("multiply-sum attention, two rollouts (before)", new_forward, two, old, 1),
        ("... both rollouts in one batch", new_forward, joint, old, 1),
        ("... one batch, dropout drawn uniform", new_forward, joint, (nn_lstm_bilstm, False), 1),
        ("... one batch, uniform dropout, encoder step by step (now)", new_forward, joint, new, 1),
        ("... now, 2 threads", new_forward, joint, new, 2),
    ]
    if args.compile:
        variants.append(("... now, compiled decoder", new_forward, joint, new, 1))
    rows = []
    for _ in range(args.repeats):  # interleaved, so a load change hits every variant alike
        for name, forward, mixed, (bilstm, torch_dropout), threads in variants:
            SoftDotAttention.forward, vln_agent.mixed_rollout = forward, mixed
            envdrop.packed_bilstm = bilstm
            compiled = name == "... now, compiled decoder"
            rate = time_updates(vln, args.updates, args.batch, threads, compiled, torch_dropout)
            rows.append({"variant": name, "updates_per_s": rate, "batch": args.batch})
            print(rows[-1], flush=True)
    SoftDotAttention.forward, vln_agent.mixed_rollout = new_forward, joint
    envdrop.packed_bilstm = step_by_step
    rows = (
        pd.DataFrame(rows)
        .groupby("variant", sort=False)
        .agg(updates_per_s=("updates_per_s", "median"), batch=("batch", "first"))
        .reset_index()
        .round(3)
    )
    rows["repeats"] = args.repeats
    df = rows
    before = df.updates_per_s[df.variant.str.endswith("(before)")].iloc[0]
    df["ratio_to_before"] = (df.updates_per_s / before).round(3)
    df["machine"] = machine_label()
    RESULTS.mkdir(parents=True, exist_ok=True)
    df.to_csv(RESULTS / "vln_update_speed.csv", index=False)
    print(f"\n{cmd}\n" + df.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
