"""VLN models and their training: follower (Envdrop), speaker, BLEU, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import sacrebleu
import torch

from envs.vln_houses import HouseSpec
from envs.vln_setup import open_vln
from envs.vln_vocab import split_sentence
from models import vln_checkpoint
from models.envdrop import PREFIXES, Follower, FollowerSize, parameter_share
from models.speaker import Speaker, SpeakerSize
from training import vln_agent, vln_speaker


@pytest.fixture(scope="module")
def vln(tmp_path_factory):
    import os

    os.environ["FEDEMBODIED_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    spec = HouseSpec(
        train_houses=3,
        unseen_houses=1,
        train_paths=10,
        val_seen_paths=3,
        val_unseen_paths=4,
        seed=5,
    )
    return open_vln("", spec=spec)


def _follower(vln, **kw):
    torch.manual_seed(0)
    return Follower(FollowerSize(len(vln.vocab), vln.world.feature_dim, **kw))


def test_follower_parameters_are_grouped_by_prefix(vln):
    model = _follower(vln)
    names = [n for n, _ in model.named_parameters()]
    assert all(n.startswith(PREFIXES) for n in names)
    assert {n.split(".")[0] + "." for n in names} == set(PREFIXES)
    paper = _follower(vln, embedding=256, hidden=512)
    assert paper.lang_encoder.lstm.hidden_size == 256 and paper.lang_encoder.lstm.bidirectional
    assert 0 < parameter_share(model, "lang_encoder.") < 1


def test_environmental_dropout_is_one_mask_per_episode_and_spares_angles(vln):
    model = _follower(vln)
    mask = model.env_drop_mask(4, "cpu")
    feats = torch.ones(4, 36, vln.world.feature_dim)
    out = model.apply_mask(feats, mask)
    assert torch.all(out[:, :, -128:] == 1)
    assert torch.all(out[:, 0, :-128] == out[:, 17, :-128])  # same mask for every view
    assert (out[:, 0, :-128] == 0).any() and not torch.equal(out[0], out[1])
    model.eval()
    assert torch.all(model.env_drop_mask(2, "cpu") == 1)


@pytest.mark.slow
def test_teacher_forcing_learns_its_episodes(vln):
    eps = vln.split("train")[:4]
    model = _follower(vln, dropout=0.0, feature_dropout=0.0)
    s = vln_agent.AgentSettings(batch_size=4, feedback="teacher", lr=3e-3)
    tokens = vln_agent.Tokens(vln.vocab, 80)
    opt = torch.optim.Adam(model.parameters(), lr=s.lr)
    first = vln_agent.train_batches(
        model, opt, vln.world, eps, tokens, s, iterations=1, rng=np.random.default_rng(0)
    )
    last = vln_agent.train_batches(
        model, opt, vln.world, eps, tokens, s, iterations=80, rng=np.random.default_rng(0)
    )
    metrics, trajs = vln_agent.evaluate(model, vln.world, eps, tokens, s)
    assert last < first / 4
    assert metrics["sr"] == 100.0 and set(trajs) == {e.instr_id for e in eps}


def test_mixed_objective_trains_the_critic_and_the_language_encoder(vln):
    eps = vln.split("train")[:6]
    model = _follower(vln)
    s = vln_agent.AgentSettings(batch_size=6)
    tokens = vln_agent.Tokens(vln.vocab, 80)
    il, _ = vln_agent.rollout(model, vln.world, eps, tokens, "teacher", s)
    rl, nb = vln_agent.rollout(model, vln.world, eps, tokens, "sample", s)
    (s.ml_weight * il + rl).backward()
    for prefix in PREFIXES:
        grads = [p.grad for n, p in model.named_parameters() if n.startswith(prefix)]
        assert any(g is not None and g.abs().sum() > 0 for g in grads), prefix
    assert all(nb.done)


@pytest.mark.slow
def test_speaker_learns_and_bleu_is_sacrebleus_corpus_bleu(vln, monkeypatch):
    eps = vln.split("train")[:12]  # 4 paths x 3 instructions
    torch.manual_seed(0)
    speaker = Speaker(
        SpeakerSize(len(vln.vocab), vln.world.feature_dim, dropout=0.0, feature_dropout=0.0)
    )
    inputs = vln_speaker.PathInputs(vln.world)
    before = vln_speaker.bleu(speaker, inputs, eps, vln.vocab)
    opt = torch.optim.Adam(speaker.parameters(), lr=3e-3)
    vln_speaker.train_batches(
        speaker,
        opt,
        inputs,
        eps,
        vln.vocab,
        vln_speaker.SpeakerSettings(batch_size=12),
        iterations=120,
        rng=np.random.default_rng(0),
    )
    after = vln_speaker.bleu(speaker, inputs, eps, vln.vocab)
    assert after > before + 20
    # With the first reference as hypothesis, BLEU is sacrebleu's score of exactly that.
    refs = {}
    for e in eps:
        refs.setdefault(e.path_id, []).append(" ".join(split_sentence(e.instruction)))
    monkeypatch.setattr(
        vln_speaker,
        "write_instructions",
        lambda sp, inp, firsts, vocab: [refs[e.path_id][0] for e in firsts],
    )
    ids = list(refs)
    expect = sacrebleu.corpus_bleu(
        [refs[i][0] for i in ids], [[refs[i][k] for i in ids] for k in range(3)], tokenize="none"
    ).score
    assert vln_speaker.bleu(speaker, inputs, eps, vln.vocab) == pytest.approx(expect) == 100


def test_imitation_loss_is_summed_over_steps_and_averaged_over_the_batch(vln):
    """Envdrop's scaling: a per-episode sum of step cross-entropies, averaged over the batch;
    a per-step mean would weigh episodes by their length and shrink the term ~T times."""
    model = _follower(vln).eval()  # no dropout: the same episode gives the same loss
    tokens = vln_agent.Tokens(vln.vocab, 80)
    s = vln_agent.AgentSettings()
    eps = sorted(vln.split("train"), key=lambda e: len(e.path))
    short, long = eps[0], eps[-1]
    assert len(short.path) != len(long.path)
    one = [
        vln_agent.rollout(model, vln.world, [e], tokens, "teacher", s)[0].item()
        for e in (short, long)
    ]
    both = vln_agent.rollout(model, vln.world, [short, long], tokens, "teacher", s)[0].item()
    assert both == pytest.approx(sum(one) / 2, rel=1e-4)


class _SpyBT(vln_agent.BackTranslation):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.masks = []

    def ids(self, batch, drop):
        self.masks.append(drop)
        return super().ids(batch, drop)


def test_back_translation_rewrites_every_route_batch_through_the_followers_dropout(
    vln, monkeypatch
):
    routes_of = [e for e in vln.split("train")][:8]
    routes = [
        e.__class__(f"r{k}", e.scan, e.path, e.heading, "", 10**7 + k)
        for k, e in enumerate(routes_of)
    ]  # no instruction: a bare route
    speaker = Speaker(SpeakerSize(len(vln.vocab), vln.world.feature_dim))
    bt = _SpyBT(speaker, vln_speaker.PathInputs(vln.world), vln.vocab)
    seen = []  # (ml weight, token ids, drop)
    real = vln_agent.mixed_rollout

    def spy(model, world, episodes, tokens, s, *, token_ids=None, drop=None):
        seen.append((episodes[0].instr_id, token_ids, drop))
        return real(model, world, episodes, tokens, s, token_ids=token_ids, drop=drop)

    monkeypatch.setattr(vln_agent, "mixed_rollout", spy)
    model = _follower(vln)
    s = vln_agent.AgentSettings(batch_size=4)
    labelled = vln.split("train")[8:16]
    vln_agent.train_batches(
        model,
        torch.optim.RMSprop(model.parameters(), 1e-3),
        vln.world,
        labelled,
        vln_agent.Tokens(vln.vocab, 80),
        s,
        iterations=3,
        rng=np.random.default_rng(0),
        routes=routes,
        back_translate=bt,
    )
    # each step: one labelled batch (its own words) and one route batch (the speaker's words)
    assert [k.startswith("r") for k, _, _ in seen] == [False, True] * 3
    assert len(bt.masks) == 3
    for (_, ids, drop), mask in zip(seen[1::2], bt.masks):
        assert drop is mask  # speaker saw the follower's mask
        assert (ids[:, 0] == vln.vocab.bos).all() and ((ids == 2).sum(1) == 1).all()
    assert all(ids is None for _, ids, _ in seen[0::2])
    with pytest.raises(ValueError, match="BackTranslation"):
        vln_agent.train_batches(
            model,
            torch.optim.RMSprop(model.parameters(), 1e-3),
            vln.world,
            [],
            vln_agent.Tokens(vln.vocab, 80),
            s,
            iterations=1,
            rng=np.random.default_rng(0),
            routes=routes,
        )


def test_speaker_sees_the_given_dropout_mask_not_its_own(vln):
    speaker = Speaker(SpeakerSize(len(vln.vocab), vln.world.feature_dim)).eval()
    eps = vln.split("train")[:2]
    acts, panos, mask = vln_speaker.PathInputs(vln.world)(eps, "cpu")
    visual = vln.world.feature_dim - 128
    ones = torch.ones(2, 1, visual)
    zeros = torch.zeros(2, 1, visual)
    a = speaker.generate(acts, panos, mask, vln.vocab.bos, 20, feature_mask=ones)
    b = speaker.generate(acts, panos, mask, vln.vocab.bos, 20)
    c = speaker.encode(acts, panos, mask, zeros)[0]
    assert torch.equal(a, b)  # eval mode: its own dropout is the identity
    assert not torch.allclose(c, speaker.encode(acts, panos, mask, ones)[0])


def test_checkpoint_round_trip_rebuilds_the_same_model(vln, tmp_path):
    model = _follower(vln).eval()
    vln_checkpoint.save(tmp_path / "a.pt", model, vln.vocab, log=[1])
    again, vocab, extra = vln_checkpoint.load(tmp_path / "a.pt")
    assert vocab.words == vln.vocab.words and extra["log"] == [1]
    for (n, p), (n2, p2) in zip(model.state_dict().items(), again.state_dict().items()):
        assert n == n2 and torch.equal(p, p2)
    tokens = torch.tensor([[vln.vocab.bos, 5, 6, 2]])
    assert torch.equal(model.lang_encoder(tokens)[0], again.eval().lang_encoder(tokens)[0])


@pytest.mark.slow
def test_centralized_script_checkpoints_each_stage_and_resumes(tmp_path, monkeypatch):
    from experiments.fedvln import centralized as vln_centralized

    monkeypatch.setenv("FEDEMBODIED_CACHE", str(tmp_path / "cache"))
    args = [
        "--iters",
        "2",
        "--speaker-iters",
        "2",
        "--aug-iters",
        "2",
        "--eval-every",
        "2",
        "--eval-size",
        "6",
        "--aug-routes",
        "2",
        "--batch-size",
        "4",
        "--train-houses",
        "2",
        "--unseen-houses",
        "1",
        "--threads",
        "1",
        "--out",
        str(tmp_path / "run"),
        "--results-dir",
        str(tmp_path / "res"),
    ]
    assert vln_centralized.main(args) == 0
    for stage in ("agent", "speaker", "augment"):
        model, vocab, extra = vln_checkpoint.load(tmp_path / "run" / "checkpoints" / f"{stage}.pt")
        assert len(vocab) == model.size.vocab and extra["log"]
    table = __import__("pandas").read_csv(tmp_path / "res" / "vln_centralized.csv")
    assert set(table["model"]) == {"Envdrop", "Envdrop_aug", "Speaker"}
    assert set(table["source"]) == {"ours", "paper"}
    stamp = (tmp_path / "run" / "agent_log.csv").stat().st_mtime_ns
    assert vln_centralized.main(args) == 0  # every stage is skipped
    assert (tmp_path / "run" / "agent_log.csv").stat().st_mtime_ns == stamp
    # another speaker recipe retrains the speaker and what uses it, not the follower
    speaker_stamp = (tmp_path / "run" / "speaker_log.csv").stat().st_mtime_ns
    assert vln_centralized.main([*args, "--speaker-word-dropout", "0.25"]) == 0
    assert (tmp_path / "run" / "agent_log.csv").stat().st_mtime_ns == stamp
    assert (tmp_path / "run" / "speaker_log.csv").stat().st_mtime_ns != speaker_stamp
    # a stage that stopped by its patience is the same run under a higher cap; one that ran
    # its whole cap is trained again (it has no optimizer state to go on from)
    conv = [*args, "--stages", "agent", "--iters", "6", "--eval-every", "1", "--patience", "1"]
    conv += ["--out", str(tmp_path / "conv")]
    assert vln_centralized.main(conv) == 0
    log = tmp_path / "conv" / "agent_log.csv"
    assert __import__("pandas").read_csv(log)["converged"].any()
    stamp = log.stat().st_mtime_ns
    assert vln_centralized.main([*conv, "--iters", "9"]) == 0
    assert log.stat().st_mtime_ns == stamp
    agent_stamp = (tmp_path / "run" / "agent_log.csv").stat().st_mtime_ns
    assert vln_centralized.main([*args, "--stages", "agent", "--iters", "3"]) == 0
    assert (tmp_path / "run" / "agent_log.csv").stat().st_mtime_ns != agent_stamp
    # augmentation's control: the augment stage's fine-tuning from the agent's best, no routes,
    # so another speaker or other routes do not retrain it, another augment lr does
    control = [*args, "--stages", "augment-control"]
    assert vln_centralized.main(control) == 0
    log = tmp_path / "run" / "augment-control_log.csv"
    assert __import__("pandas").read_csv(log)["iteration"].max() == 2
    stamp = log.stat().st_mtime_ns
    assert vln_centralized.main([*control, "--speaker-word-dropout", "0", "--aug-routes", "3"]) == 0
    assert log.stat().st_mtime_ns == stamp
    assert vln_centralized.main([*control, "--aug-lr", "0.001"]) == 0
    assert log.stat().st_mtime_ns != stamp


def test_centralized_script_bad_input_is_one_clear_line(tmp_path, capsys, monkeypatch):
    from experiments.fedvln import centralized as vln_centralized

    monkeypatch.setenv("FEDEMBODIED_CACHE", str(tmp_path / "cache"))
    missing = tmp_path / "nowhere"
    assert vln_centralized.main(["--data-dir", str(missing), "--out", str(tmp_path / "r")]) == 2
    assert f"{missing}: no such folder (real datasets are read from ../shared/data" in (
        capsys.readouterr().err
    )
    assert (
        vln_centralized.main(
            [
                "--stages",
                "augment",
                "--train-houses",
                "2",
                "--unseen-houses",
                "1",
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    assert "augment stage needs the speaker stage first" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        vln_centralized.main(["--iters", "0"])
    assert e.value.code == 2 and "--iters: must be a positive integer" in capsys.readouterr().err
    assert vln_centralized.main(["--aug-lr", "0", "--out", str(tmp_path / "r")]) == 2
    assert "--aug-lr" in capsys.readouterr().err


def test_centralized_augment_fine_tunes_at_its_own_learning_rate(monkeypatch, tmp_path):
    """The augment stage starts a fresh optimizer on the trained follower at --aug-lr (the
    recipe's fine-tuning lr, as the houses' augment stage), the agent stage at --lr."""
    from config.fedvln_recipe import CPU
    from experiments.fedvln import centralized as vln_centralized

    made = []
    monkeypatch.setattr(vln_centralized, "make_optimizer", lambda o, p, lr: made.append(lr))
    monkeypatch.setattr(vln_centralized.vln_checkpoint, "save", lambda *a, **k: None)
    a = vln_centralized.parse_args(["--iters", "1", "--aug-iters", "1"])
    a.iters = a.aug_iters = 0  # no training step: only the optimizer each stage makes
    for stage in ("agent", "augment"):
        model = torch.nn.Linear(1, 1)
        vln = __import__("types").SimpleNamespace(vocab=None)
        vln_centralized.train_follower(a, vln, model, [], {}, stage, tmp_path, None, None)
    assert made == [CPU["agent"].lr, CPU["augment"].lr] and made[0] != made[1]


def test_a_checkpoint_that_would_run_code_is_refused(vln, tmp_path):
    """torch.load(weights_only=True): a pickle that calls a function is a DataError naming the
    file, and the function never runs."""
    import pickle

    from envs.errors import DataError

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    bad = tmp_path / "evil.pt"
    torch.save(
        {"kind": "Follower", "size": {}, "state": {}, "x": Evil()}, bad, pickle_module=pickle
    )
    with pytest.raises(DataError, match="evil.pt: not a follower/speaker checkpoint"):
        vln_checkpoint.load(bad)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(DataError, match="junk.pt"):
        vln_checkpoint.load(tmp_path / "junk.pt")
    good = tmp_path / "ok.pt"
    vln_checkpoint.save(good, _follower(vln), vln.vocab, score=np.float64(1.5), at=(1, 2))
    _, _, extra = vln_checkpoint.load(good)
    assert extra == {"score": 1.5, "at": [1, 2]}


def test_centralized_stages_stop_by_the_same_patience_and_count_as_finished(tmp_path, monkeypatch):
    """--patience 1 with a follower that cannot change (lr 1e-9): evaluations at 2 and 4 score
    the same, so the agent stage stops at 4 of 20, marks its log, and a rerun skips it."""
    import pandas as pd

    from experiments.fedvln import centralized as vln_centralized

    monkeypatch.setenv("FEDEMBODIED_CACHE", str(tmp_path / "cache"))
    args = [
        *("--stages", "agent", "--iters", "20", "--eval-every", "2", "--patience", "1"),
        *("--lr", "1e-9", "--eval-size", "6", "--batch-size", "4"),
        *("--train-houses", "2", "--unseen-houses", "1", "--out", str(tmp_path / "run")),
        *("--results-dir", str(tmp_path / "res")),
    ]
    assert vln_centralized.main(args) == 0
    log = pd.read_csv(tmp_path / "run" / "agent_log.csv")
    assert list(log["iteration"]) == [2, 4] and bool(log["converged"].iloc[-1])
    stamp = (tmp_path / "run" / "agent_log.csv").stat().st_mtime_ns
    assert vln_centralized.main(args) == 0
    assert (tmp_path / "run" / "agent_log.csv").stat().st_mtime_ns == stamp


def test_one_batch_mixed_rollout_gives_the_two_rollouts_losses_and_their_gradients(vln):
    """mixed_rollout decodes the imitation and the A2C rollout as one batch with a compacted
    state: with no random draws (eval mode, sampling made the argmax) its losses and their
    gradients are those of two separate rollouts, and the every-row rollout's too."""
    from unittest import mock

    from experiments.fedvln.update_speed import same_rollouts

    model = _follower(vln).eval()
    s = vln_agent.AgentSettings(batch_size=6)
    tokens = vln_agent.Tokens(vln.vocab, 80)
    eps = vln.split("train")[:6]
    argmax = mock.patch.object(
        torch.distributions.Categorical, "sample", lambda d, shape=(): d.logits.argmax(-1)
    )
    grads = []
    with argmax:
        for joint in (True, False):
            model.zero_grad()
            if joint:
                t, rl = vln_agent.mixed_rollout(model, vln.world, eps, tokens, s)
            else:
                t, _ = vln_agent.rollout(model, vln.world, eps, tokens, "teacher", s)
                rl, _ = vln_agent.rollout(model, vln.world, eps, tokens, "sample", s)
            (0.2 * t + rl).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            assert rl.abs() > 0 and t > 0
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(*grads))
    assert same_rollouts(vln, 8)


def test_step_by_step_encoder_is_nn_lstm_on_a_packed_sequence():
    """models/envdrop.packed_bilstm gives what nn.LSTM on a PackedSequence gives: the padded
    outputs (zero past each row's end), each direction's final h and c at the row's own last
    token, and the same gradients, for rows of any length in any order."""
    from torch import nn

    from models.envdrop import packed_bilstm

    torch.manual_seed(0)
    lstm = nn.LSTM(8, 6, batch_first=True, bidirectional=True)
    lengths = torch.tensor([3, 7, 1, 7, 5, 2])
    x = torch.randn(6, 9, 8) * (torch.arange(9)[None, :, None] < lengths[:, None, None])
    got = []
    for encode in ("nn.LSTM", "step by step"):
        xx, _ = x.clone().requires_grad_(), lstm.zero_grad()
        if encode == "nn.LSTM":
            packed = nn.utils.rnn.pack_padded_sequence(xx, lengths, True, enforce_sorted=False)
            out, (h, c) = lstm(packed)
            out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=9)
        else:
            out, h, c = packed_bilstm(lstm, xx, lengths)
        (out.square().sum() + (h * torch.arange(6.0)[:, None]).sum() + 3 * c.sum()).backward()
        got.append([out, h, c, xx.grad, *(p.grad.clone() for p in lstm.parameters())])
    for a, b in zip(*got, strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-6)
    assert got[1][0][0, 3:].abs().sum() == 0  # past row 0's 3 tokens


def test_follower_dropout_is_inverted_dropout_with_rate_p():
    """models/envdrop.Dropout zeroes each element with probability p and scales the rest by
    1/(1-p) in training, and is the identity in eval mode."""
    from models.envdrop import Dropout

    torch.manual_seed(0)
    x = torch.ones(200_000)
    d = Dropout(0.3)
    y = d(x)
    assert abs((y == 0).float().mean().item() - 0.3) < 0.005
    assert torch.allclose(y[y != 0], torch.full_like(y[y != 0], 1 / 0.7))
    assert torch.equal(d.eval()(x), x) and torch.equal(Dropout(1.0)(x), torch.zeros_like(x))
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.5)
