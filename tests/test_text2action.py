"""Text2Action (FedRL Sec. 5.2): EASDRL's rewards and F1, the world, the parties' features, and
the same two-party protocol under Flower as in one process."""

import numpy as np
import pytest
import torch

from config import parse
from config.schema import ConfigError, merged
from contracts.fedrl import PLAY
from envs.text2action import Corpus, TextWorld, f1_counts, prf
from models.text_cnn import PosFeatures, WordFeatures
from server import fedrl_run as fedrl_server
from tests.conftest import SHARED_DATA
from tests.fedrl_parity import assert_flower_equals_local
from training.fedrl_baselines import train
from training.fedrl_protocol import DirectTransport
from training.fedrl_setup import Settings

DATA = SHARED_DATA / "text2action"
needs_data = pytest.mark.skipif(
    not (DATA / "win2k_labeled_text_data.pkl").is_file(), reason=f"real data not found under {DATA}"
)
TINY = {
    "method": "fedrl",
    "fedrl.domain": "text2action",
    "fedrl.t2a-data": str(DATA),
    "fedrl.t2a-words": 30,
    "fedrl.envs": 4,
    "fedrl.act-steps": 3,
    "fedrl.updates": 4,
    "fedrl.batch-size": 8,
    "fedrl.warmup": 16,
    "fedrl.target-update": 2,
    "num-server-rounds": 4,
    "eval-every": 2,
}


def crafted(num_words: int = 10) -> Corpus:
    """One text: a required action, a non-action, an optional action, two mutually exclusive
    actions, a non-action."""
    labels = np.zeros((1, num_words), np.int8)
    labels[0, :6] = [2, 1, 3, 4, 4, 1]
    ids = np.array([0])
    return Corpus(
        [["w"] * 6],
        labels,
        np.zeros((1, num_words), np.int64),
        [{3: [4], 4: [3]}],
        np.array([6]),
        2,
        {"train": ids, "valid": ids, "test": ids},
        num_words,
    )


def test_rewards_follow_the_reference_environment_step_by_step():
    """Environment.act (act mode) with reward_base 50, reward_assign [1, 2, 3], the 5 rho^2
    action-rate term (rho = selected / num_words) and DQNAgent.step's +2 on the last word."""
    w = TextWorld(crafted(), "test", 1, evaluation=True)
    got = [float(w.step(np.array([a]))[0][0]) for a in (1, 0, 0, 1, 1, 1)]
    # select required (100 - 2.5), neglect non-action (50 - 2.5), neglect optional (0),
    # select the first exclusive (150 - 10), select the excluded one (-150 - 22.5),
    # select a non-action (-50 - 40) + 2 at the end
    assert got == pytest.approx([97.5, 47.5, 0.0, 140.0, -172.5, -88.0])
    assert not w.active.any()
    # F1 over action words: the exclusive pair counts once and is wrong (both selected)
    assert w.counts.tolist() == [2, 1, 4]
    rep = w.report(np.array([sum(got)]), np.zeros(1))
    assert rep["precision"] == pytest.approx(0.25) and rep["recall"] == pytest.approx(0.5)
    assert rep["f1"] == pytest.approx(1 / 3) and rep["avg-reward"] == pytest.approx(24.5 / 6)


def test_f1_counts_optional_actions_only_when_selected_and_exclusive_groups_once():
    c = crafted()
    lab, rel = c.labels[0], c.related[0]
    perfect = np.array([2, 1, 2, 2, 1, 1, 0, 0, 0, 0])
    assert f1_counts(lab, perfect, rel, 6).tolist() == [3, 3, 3]
    skip_optional = np.array([2, 1, 1, 1, 2, 1, 0, 0, 0, 0])  # the other exclusive one: right
    assert f1_counts(lab, skip_optional, rel, 6).tolist() == [2, 2, 2]
    assert prf(np.array([0, 0, 0]))["f1"] == 0.0


@needs_data
def test_the_expert_scores_f1_one_and_every_text_is_walked_once():
    s = Settings.of(parse(merged(TINY)))
    w = s.world("test")
    assert w.B == len(s.split("test")) == 30
    steps = 0
    while w.active.any():
        w.step(w.expert())
        steps += 1
    c = s.corpus()
    assert steps == c.lengths[s.split("test")].max()
    assert w.steps[0] == c.lengths[s.split("test")].sum()
    # the reward's expert is right on every word but where the data's exclusion lists are
    # one-sided (a excludes b, b does not list a: 1 of win2k's 11 pairs), so both get selected
    assert 0.99 <= w.report(np.zeros(w.B), np.zeros(w.B))["f1"] < 1.0


@needs_data
def test_training_world_state_round_trips_and_walks_shuffled_train_texts():
    s = Settings.of(parse(merged(TINY)))
    a = s.world("train")
    for _ in range(40):
        a.step(np.ones(a.B, np.int64))
    b = s.world("train", reset=False)
    b.load_state(a.state())
    for _ in range(40):
        ra = a.step(np.zeros(a.B, np.int64))
        rb = b.step(np.zeros(b.B, np.int64))
        assert np.array_equal(ra[0], rb[0]) and np.array_equal(ra[3], rb[3])
    assert set(a.text.tolist()) <= set(s.split("train").tolist())
    assert a.episode.sum() > 0


@needs_data
def test_each_party_sees_only_its_own_features():
    """alpha's TextCNN reads POS ids (trained embedding), beta's word vectors (fixed); neither
    table is in what a party saves or sends."""
    local = DirectTransport(Settings.of(parse(merged(TINY))))
    assert isinstance(local.alpha.q.features, PosFeatures)
    assert isinstance(local.beta.q.features, WordFeatures)
    assert not any(isinstance(m, WordFeatures) for m in local.alpha.q.modules())
    assert not any(isinstance(m, PosFeatures) for m in local.beta.q.modules())
    assert not any("table" in k for k in local.beta.state_arrays())
    assert local.alpha.mlp.hidden.out_features == 4 and local.alpha.mlp.heads[0].out_features == 2
    wide = Settings.of(parse(merged({**TINY, "fedrl.mlp-hidden": 32})))
    assert DirectTransport(wide).beta.mlp.hidden.out_features == 32


@needs_data
@pytest.mark.slow
def test_flower_exchange_equals_the_single_process_run_on_text2action(tmp_path):
    flower, grid = assert_flower_equals_local(merged({**TINY, "out-dir": str(tmp_path)}), tmp_path)
    last = flower.iloc[-1]
    assert 0 <= last["best-test-f1-test_noise=on"] <= 1
    # beta never receives a reward, a label or alpha's features: only these arrays reach it
    to_beta = set()
    for msg in grid.sent:
        if msg.metadata.dst_node_id == sorted(grid.contexts)[1] and "data" in msg.content:
            to_beta |= {k.split(PLAY)[0] for k in msg.content["data"].keys()}
    assert to_beta <= {"prev-alpha", "c-alpha", "ids", "update-ids", "y", "c-alpha-ids"}


@needs_data
def test_supervised_baseline_learns_beyond_the_random_floor():
    s = Settings.of(parse(merged({**TINY, "fedrl.updates": 8})))
    fcn = train("fcn-alpha", s, 12, eval_every=6, log=None)[-1]
    floor = train("random-alpha", s, 1, log=None)[-1]
    assert fcn["best-test-f1"] > floor["test-f1"] + 0.2


@needs_data
@pytest.mark.parametrize(
    "override, key",
    [
        ({"fedrl.t2a-dataset": "recipes"}, "fedrl.t2a-dataset"),
        ({"fedrl.t2a-data": "/nonexistent/t2a"}, "fedrl.t2a-data"),
        ({"fedrl.action-mode": "paper"}, "fedrl.action-mode"),
        ({"fedrl.t2a-fold": 7}, "fedrl.t2a-fold"),
        ({"fedrl.domain": "atari"}, "fedrl.domain"),
    ],
)
def test_bad_text2action_config_names_the_key(override, key):
    with pytest.raises(ConfigError, match=key):
        fedrl_server.check_config(parse(merged({**TINY, **override})))


@needs_data
@pytest.mark.slow
def test_word_vectors_are_trained_reproducibly_offline(tmp_path, monkeypatch):
    from envs.word_vectors import word_vectors

    monkeypatch.setenv("FEDEMBODIED_CACHE", str(tmp_path / "a"))
    first = word_vectors(DATA)
    monkeypatch.setenv("FEDEMBODIED_CACHE", str(tmp_path / "b"))
    second = word_vectors(DATA)
    assert len(first) > 8000 and all(np.array_equal(first[w], second[w]) for w in first)
    v = lambda w: torch.as_tensor(first[w])  # noqa: E731
    cos = torch.nn.functional.cosine_similarity
    assert cos(v("click"), v("select"), 0) > cos(v("click"), v("water"), 0)


def test_target_copies_default_to_the_domains_period_and_an_explicit_one_wins():
    """fedrl.target-update = 0: every 1,000 updates on Text2Action (5 and 100 let FedRL's Q
    diverge there: experiments/results/fedrl_t2a_collapse.csv), 100 on Grid-World."""
    text = {k: v for k, v in TINY.items() if k != "fedrl.target-update"}
    assert Settings.of(parse(merged(text))).target_every == 1000
    assert Settings.of(parse(merged({**text, "fedrl.target-update": 7}))).target_every == 7
    assert Settings.of(parse(merged({"method": "fedrl"}))).target_every == 100
