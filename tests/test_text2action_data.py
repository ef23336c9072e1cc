"""The Text2Action loader on the real EASDRL pickles, and its refusal to run code."""

import pickle

import numpy as np
import pytest

from envs.errors import DataError
from envs.text2action_data import folds, load_domain, safe_load
from tests.conftest import SHARED_DATA

DATA = SHARED_DATA / "text2action"
SIZES = {"win2k": (154, 6927, 1349), "cooking": (116, 24284, 2519), "wikihow": (150, 62576, 4647)}


@pytest.mark.parametrize("domain", sorted(SIZES))
def test_real_corpora_load_with_their_sizes_and_official_folds(domain):
    if not (DATA / f"{domain}_labeled_text_data.pkl").is_file():
        pytest.skip(f"real data not found under {DATA}")
    texts = load_domain(DATA, domain)
    n, words, acts = SIZES[domain]
    assert len(texts) == n and sum(len(t.words) for t in texts) == words
    assert sum(int((t.tags > 1).sum()) for t in texts) <= acts  # an index may repeat
    assert all(len(t.pos) == len(t.words) for t in texts)
    five = folds(DATA, domain, 5)
    assert len(five) == 5 and sorted(np.concatenate(five).tolist()) == list(range(n))


class _Evil:
    def __reduce__(self):
        return (exec, ("open('PWNED', 'w').write('x')",))


def test_a_pickle_that_would_run_code_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "win2k_labeled_text_data.pkl"
    bad.write_bytes(pickle.dumps([{"words": ["a"], "acts": [], "x": _Evil()}]))
    with pytest.raises(DataError, match="builtins.exec is not allowed"):
        safe_load(bad)
    assert not (tmp_path / "PWNED").exists()
    with pytest.raises(DataError, match="file not found"):
        load_domain(tmp_path, "cooking")
    with pytest.raises(DataError, match="cooking_dependency.pkl: file not found"):
        (tmp_path / "cooking_labeled_text_data.pkl").write_bytes(pickle.dumps([]))
        load_domain(tmp_path, "cooking")
    (tmp_path / "cooking_dependency.pkl").write_bytes(pickle.dumps([]))
    (tmp_path / "cooking_labeled_text_data.pkl").write_bytes(b"\x80\x02junk")
    with pytest.raises(DataError, match="cooking_labeled_text_data.pkl"):
        load_domain(tmp_path, "cooking")


@pytest.mark.parametrize("field, act", [("act_idx", -1), ("act_idx", 3), ("related_acts", -2)])
def test_an_action_index_outside_the_text_names_the_file_and_text(tmp_path, field, act):
    """issue 62: act_idx -1 was accepted (numpy tags the last word); any index of a word the
    text does not have, in act_idx or related_acts, is refused naming the file and the text."""
    good = {"act_idx": 0, "act_type": 1, "related_acts": []}
    bad = {**good, field: [act] if field == "related_acts" else act}
    texts = [{"words": ["a", "b", "c"], "acts": [good]}, {"words": ["a", "b", "c"], "acts": [bad]}]
    deps = [[[("a", "DT"), ("b", "NN"), ("c", "VB")]]] * 2
    (tmp_path / "win2k_labeled_text_data.pkl").write_bytes(pickle.dumps(texts))
    (tmp_path / "win2k_dependency.pkl").write_bytes(pickle.dumps(deps))
    with pytest.raises(DataError, match=rf"text 1: action index {act} outside its 3 words"):
        load_domain(tmp_path, "win2k")
    texts[1] = texts[0]
    (tmp_path / "win2k_labeled_text_data.pkl").write_bytes(pickle.dumps(texts))
    assert len(load_domain(tmp_path, "win2k")) == 2  # the same file with the index fixed loads
