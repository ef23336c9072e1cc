"""Training and evaluation of the Envdrop follower on a NavBatch, in plain PyTorch (no flwr).

The training objective is Envdrop's mixed one: a teacher-forcing pass (cross-entropy towards
the shortest-path action, weighted by `ml_weight`) plus a sampling pass trained by A2C with
Envdrop's rewards (+-1 for getting closer/farther, +-2 for stopping within/outside 3 m), the
critic's value as baseline and bootstrap, discount 0.9 and an entropy bonus. `feedback =
"teacher"` trains by imitation only.

Loss scaling is Envdrop's (`r2r_src/agent.py` l. 324, 403-446 of eric-ai-lab/FedVLN@2f98fd9):
the imitation cross-entropy is summed over steps and divided by the batch size, the A2C term is
divided by the number of valid steps (`--normalize total`). So `ml_weight` = 0.2 weighs a
per-episode sum against a per-step mean, as in the official code.

Back-translation (`train_batches(..., back_translate=...)`, Envdrop's `rollout(speaker=...)`,
l. 246-264): for each batch of speaker-made routes the speaker writes a fresh greedy instruction
while seeing the features through the same environmental-dropout mask the follower then uses on
that batch, so every pass over a route sees a new "environment" and a new instruction.
Choice: the mask is drawn per episode (as the follower's environmental dropout is here), not
one mask for the whole batch as in Envdrop; it is shared by speaker and follower as there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from config import Config
from config.fedvln_recipe import recipe_of
from envs.vln_data import Episode
from envs.vln_env import NavBatch, World
from envs.vln_features import ANGLE_DIM
from envs.vln_metrics import episode_metrics, summarize
from envs.vln_vocab import EOS, PAD, Vocab
from models.envdrop import Follower
from training.vln_loop import Batches, train_steps


@dataclass(frozen=True)
class AgentSettings:
    batch_size: int = 32
    lr: float = 1e-3
    feedback: str = "mixed"  # mixed | teacher
    ml_weight: float = 0.2  # Envdrop's mlWeight
    gamma: float = 0.9
    entropy: float = 0.01
    max_actions: int = 35
    max_words: int = 80
    aug_ml_weight: float = 0.6  # mlWeight on speaker-written batches (official train.py l. 316)

    @classmethod
    def of(cls, c: Config) -> AgentSettings:
        """The follower's local training settings of a run (Envdrop's mixed feedback,
        imitation weights, the recipe's learning rate)."""
        return cls(
            batch_size=c.fedvln.batch_size,
            lr=recipe_of(c.fedvln).lr,
            feedback=c.fedvln.feedback,
            ml_weight=c.fedvln.ml_weight,
            aug_ml_weight=c.fedvln.aug_ml_weight,
        )


class Tokens:
    """Instruction token ids of labelled episodes, encoded once per (instr_id, text)."""

    def __init__(self, vocab: Vocab, max_words: int):
        self.vocab, self.max_words, self._cache = vocab, max_words, {}

    def __call__(self, episodes: list[Episode]) -> torch.Tensor:
        rows = []
        for e in episodes:
            key = (e.instr_id, e.instruction)
            if key not in self._cache:
                self._cache[key] = self.vocab.encode(e.instruction, self.max_words)
            rows.append(self._cache[key])
        arr = np.stack(rows)
        return torch.from_numpy(arr[:, : max(2, int((arr != 0).sum(1).max()))])


def rollout(
    model: Follower,
    world: World,
    episodes: list[Episode],
    tokens: Tokens,
    mode: str,
    s: AgentSettings,
    *,
    token_ids: torch.Tensor | None = None,
    drop: torch.Tensor | None = None,
):
    """Run a batch to the end. mode: `teacher` (follow and imitate the shortest path),
    `sample` (A2C) or `greedy` (evaluation). `token_ids` replace the episodes' instructions
    (back-translation); `drop` is the environmental-dropout mask to use (default: a fresh
    one). Returns (loss or None, NavBatch).

    Each step decodes only the episodes still running (the batch is compacted to them and
    the results scattered back), so a batch's cost follows its active rows rather than its
    longest episode: finished rows contributed nothing but masked zeros
    (experiments/fedvln/update_speed.py measures both)."""
    dev = next(model.parameters()).device
    nb = NavBatch(world, episodes, s.max_actions)
    B = len(episodes)
    ids = token_ids if token_ids is not None else tokens(episodes)
    ctx, ctx_mask, h, c = model.lang_encoder(ids.to(dev))
    if drop is None:
        drop = model.env_drop_mask(B, dev)
    prev = torch.zeros(B, ANGLE_DIM, device=dev)
    ce, logps, ents, values, rewards, masks = [], [], [], [], [], []
    last_dist = nb.distance_to_goal()
    while not nb.done.all():
        was_active = ~nb.done
        rows = torch.from_numpy(np.flatnonzero(was_active)).to(dev)
        d = drop[rows]
        pano = model.apply_mask(torch.from_numpy(nb.pano[was_active]).to(dev), d)
        cand = model.apply_mask(torch.from_numpy(nb.cand_feat[was_active]).to(dev), d)
        cmask = torch.from_numpy(nb.cand_mask[was_active]).to(dev)
        logit, h_a, c_a, h_tilde = model.decoder(
            prev[rows], pano, cand, cmask, h[rows], c[rows], ctx[rows], ctx_mask[rows]
        )
        h, c = h.index_copy(0, rows, h_a), c.index_copy(0, rows, c_a)
        target = torch.from_numpy(nb.teacher()[was_active]).to(dev)
        if mode == "teacher":
            ce.append(nn.functional.cross_entropy(logit, target.clamp(min=0), reduction="sum"))
            action = target.clamp(min=0)
        elif mode == "sample":
            dist = torch.distributions.Categorical(logits=logit)
            action = dist.sample()
            zeros = torch.zeros(B, device=dev)
            logps.append(zeros.index_copy(0, rows, dist.log_prob(action)))
            ents.append(zeros.index_copy(0, rows, dist.entropy()))
            values.append(zeros.index_copy(0, rows, model.critic(h_tilde).squeeze(1)))
        else:
            action = logit.argmax(1)
        prev = prev.index_copy(
            0, rows, cand[torch.arange(len(rows), device=dev), action, -ANGLE_DIM:]
        )
        a = np.zeros(B, dtype=np.int64)
        a[was_active] = action.cpu().numpy()
        nb.step(a)
        if mode == "sample":
            dist_now = nb.distance_to_goal()
            r = np.where(a == 0, np.where(dist_now < 3.0, 2.0, -2.0), np.sign(last_dist - dist_now))
            rewards.append(r * was_active)
            masks.append(was_active.astype(np.float32))
            last_dist = dist_now
    if mode == "teacher":  # summed over steps, divided by the batch (Envdrop l. 445)
        return torch.stack(ce).sum() / B, nb
    if mode == "sample":
        stacked = [torch.stack(x) for x in (logps, ents, values)]
        return a2c_loss(*stacked, rewards, masks, nb.stopped, s, dev), nb
    return None, nb


def mixed_rollout(
    model: Follower,
    world: World,
    episodes: list[Episode],
    tokens: Tokens,
    s: AgentSettings,
    *,
    token_ids: torch.Tensor | None = None,
    drop: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Envdrop's mixed objective's two rollouts, the imitation one (`teacher`) and the A2C one
    (`sample`), decoded as one batch of 2B rows: rows 0..B-1 follow the teacher, rows B..2B-1
    sample, both under the same environmental dropout `drop`, each half encoding the
    instruction with its own dropout draw as two separate rollouts would. Returns (teacher
    loss, A2C loss), the values `rollout` gives for each mode.

    Why one batch: a CPU update at batch 32 is dominated by per-operation overhead, forward
    and backward. One decoder call per step instead of two, a decoder state kept compacted
    to the running rows (re-indexed only when some episode ends, not gathered from the full
    batch at every step), and the critic and the per-step A2C terms gathered once at the end
    cut the autograd graph to a fraction (experiments/fedvln/update_speed.py checks the losses
    against two rollouts and times both). Only the order of the random draws differs from two
    rollouts (the same distributions)."""
    dev = next(model.parameters()).device
    B = len(episodes)
    nb = NavBatch(world, list(episodes) + list(episodes), s.max_actions)
    ids = token_ids if token_ids is not None else tokens(episodes)
    ctx, ctx_mask, h, c = model.lang_encoder(torch.cat([ids, ids]).to(dev))
    if drop is None:
        drop = model.env_drop_mask(B, dev)
    drop = torch.cat([drop, drop])
    prev = torch.zeros(2 * B, ANGLE_DIM, device=dev)
    alive = np.arange(2 * B)  # the rows the compacted state holds: those still running
    ce, steps, logps, ents, h_tildes, rewards, masks = [], [], [], [], [], [], []
    last_dist = nb.distance_to_goal()[B:]
    while len(alive):
        n_t = int((alive < B).sum())  # rows ascend: the teacher's come first
        pano = model.apply_mask(torch.from_numpy(nb.pano[alive]).to(dev), drop)
        cand = model.apply_mask(torch.from_numpy(nb.cand_feat[alive]).to(dev), drop)
        cmask = torch.from_numpy(nb.cand_mask[alive]).to(dev)
        logit, h, c, h_tilde = model.decoder(prev, pano, cand, cmask, h, c, ctx, ctx_mask)
        action = torch.from_numpy(nb.teacher()[alive[:n_t]]).to(dev).clamp(min=0)
        if n_t:
            ce.append(nn.functional.cross_entropy(logit[:n_t], action, reduction="sum"))
        sampling = n_t < len(alive)
        if sampling:
            dist = torch.distributions.Categorical(logits=logit[n_t:])
            sampled = dist.sample()
            t = len(rewards)  # this step's (step, row) cells of the T x B A2C terms
            steps.append(torch.from_numpy(t * B + alive[n_t:] - B).to(dev))
            logps.append(dist.log_prob(sampled))
            ents.append(dist.entropy())
            h_tildes.append(h_tilde[n_t:])
            action = torch.cat([action, sampled])
        prev = cand[torch.arange(len(alive), device=dev), action, -ANGLE_DIM:]
        a = np.zeros(2 * B, dtype=np.int64)
        a[alive] = action.cpu().numpy()
        was = ~nb.done
        nb.step(a)
        if sampling:
            dist_now, a_s = nb.distance_to_goal()[B:], a[B:]
            r = np.where(
                a_s == 0, np.where(dist_now < 3.0, 2.0, -2.0), np.sign(last_dist - dist_now)
            )
            rewards.append(r * was[B:])
            masks.append(was[B:].astype(np.float32))
            last_dist = dist_now
        still = ~nb.done[alive]
        if not still.all():  # some episodes ended: compact the state to the running ones
            keep = torch.from_numpy(np.flatnonzero(still)).to(dev)
            alive = alive[still]
            ctx, ctx_mask, h, c = ctx[keep], ctx_mask[keep], h[keep], c[keep]
            prev, drop = prev[keep], drop[keep]
    teacher = torch.stack(ce).sum() / B  # summed over steps, divided by the batch (l. 445)
    cells, T = torch.cat(steps), len(rewards)

    def grid(x):  # the per-step values of the sampling rows, as T x B (0 where not running)
        return torch.zeros(T * B, device=dev).index_copy(0, cells, x).view(T, B)

    values = grid(model.critic(torch.cat(h_tildes)).squeeze(1))
    rl = a2c_loss(
        grid(torch.cat(logps)),
        grid(torch.cat(ents)),
        values,
        rewards,
        masks,
        nb.stopped[B:],
        s,
        dev,
    )
    return teacher, rl


def a2c_loss(logps, ents, values, rewards, masks, stopped: np.ndarray, s, dev) -> torch.Tensor:
    """Envdrop's A2C loss of one sampled rollout: log-probabilities, entropies and critic
    values as T x B tensors (0 where a row had ended), per-step rewards and active masks
    (arrays of B), and `stopped`, the rows ended by STOP."""
    T = len(rewards)
    rewards, masks = np.array(rewards), np.array(masks)
    # Episodes cut off at max_actions bootstrap from the critic; stopped ones from 0.
    with torch.no_grad():
        tail = values[-1].detach().cpu().numpy() * (~stopped) if T else 0
    ret = np.zeros_like(rewards)
    run = tail
    for t in reversed(range(T)):
        run = rewards[t] + s.gamma * run * masks[t]
        ret[t] = run
    ret_t = torch.from_numpy(ret.astype(np.float32)).to(dev)
    mask_t = torch.from_numpy(masks).to(dev)
    v = values
    adv = (ret_t - v).detach()
    n = mask_t.sum().clamp(min=1)
    policy = -(logps * adv).sum() / n
    value = 0.5 * (((ret_t - v) ** 2) * mask_t).sum() / n
    entropy = -s.entropy * ents.sum() / n
    return policy + value + entropy


class BackTranslation:
    """What a house needs to back-translate its speaker-made routes: the speaker and its path
    inputs. `ids(batch, drop)` gives follower token ids `<BOS> words <EOS>` for a batch."""

    def __init__(self, speaker, inputs, vocab: Vocab, max_words: int = 80):
        self.speaker, self.inputs, self.vocab, self.max_words = speaker, inputs, vocab, max_words

    @torch.no_grad()
    def ids(self, batch: list[Episode], drop: torch.Tensor) -> torch.Tensor:
        was = self.speaker.training
        self.speaker.eval()
        acts, panos, mask = self.inputs(batch, drop.device)
        words = self.speaker.generate(
            acts, panos, mask, self.vocab.bos, self.max_words - 2, feature_mask=drop
        )
        self.speaker.train(was)
        bos = torch.full((len(batch), 1), self.vocab.bos, dtype=torch.long, device=drop.device)
        ids = torch.cat([bos, words, torch.zeros_like(bos)], 1)
        # an instruction cut at max_words ends with <EOS>, as Envdrop forces (l. 257-258)
        ended = (words == EOS).any(1)
        lengths = (ids != PAD).sum(1)
        ids[~ended, lengths[~ended]] = EOS
        return ids


def _mixed_loss(model, world, batch, tokens, s, ml_weight, bt: BackTranslation | None):
    dev = next(model.parameters()).device
    drop = model.env_drop_mask(len(batch), dev)
    ids = bt.ids(batch, drop) if bt is not None else None
    if s.feedback == "mixed":
        teacher, rl = mixed_rollout(model, world, batch, tokens, s, token_ids=ids, drop=drop)
        return ml_weight * teacher + rl
    loss, _ = rollout(model, world, batch, tokens, "teacher", s, token_ids=ids, drop=drop)
    return loss


def train_batches(
    model: Follower,
    optimizer,
    world: World,
    episodes: list[Episode],
    tokens: Tokens,
    s: AgentSettings,
    *,
    iterations: int,
    rng: np.random.Generator,
    progress=None,
    routes: list[Episode] = (),
    back_translate: BackTranslation | None = None,
) -> float:
    """`iterations` optimizer steps of the mixed (or teacher-only) objective; returns the
    mean loss.

    With speaker-made `routes` and labelled `episodes` (Envdrop's and FedVLN's `--accumulateGrad`
    back-translation, official train.py l. 492-508), each step adds the gradients of one
    labelled batch (mlWeight `ml_weight`) and one back-translated route batch (`aug_ml_weight`).
    With routes only (pre-exploration in an unseen house, l. 708-711), each step is one
    back-translated batch. Routes that carry their own words (`fedvln.route-words = "grammar"`)
    are trained on those, weighed as back-translated ones."""
    if not routes:
        return train_steps(
            model,
            optimizer,
            episodes,
            s.batch_size,
            iterations,
            rng,
            lambda b: _mixed_loss(model, world, b, tokens, s, s.ml_weight, None),
            progress,
        )
    if back_translate is None and not all(e.instruction for e in routes):
        raise ValueError("speaker-made routes need a BackTranslation (the house's speaker)")
    aug = lambda b: _mixed_loss(model, world, b, tokens, s, s.aug_ml_weight, back_translate)  # noqa: E731
    if not episodes:
        return train_steps(
            model, optimizer, list(routes), s.batch_size, iterations, rng, aug, progress
        )
    labelled = Batches(episodes, s.batch_size, rng)
    return train_steps(
        model,
        optimizer,
        list(routes),
        s.batch_size,
        iterations,
        rng,
        lambda b: _mixed_loss(model, world, labelled.next(), tokens, s, s.ml_weight, None) + aug(b),
        progress,
    )


@torch.no_grad()
def evaluate(
    model: Follower, world: World, episodes: list[Episode], tokens: Tokens, s: AgentSettings
) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Greedy decoding on every episode: (metric means, {instr_id: trajectory viewpoints})."""
    model.eval()
    rows, trajs = [], {}
    for i in range(0, len(episodes), 64):
        batch = episodes[i : i + 64]
        _, nb = rollout(model, world, batch, tokens, "greedy", s)
        for e, scan, traj, ref in zip(batch, nb.scans, nb.trajs, nb.refs):
            rows.append(episode_metrics(scan, traj, ref))
            trajs[e.instr_id] = [scan.ids[v] for v in traj]
    model.train()
    return summarize(rows), trajs
