"""Every malformed input of tests/fuzz_corpus.py (flags, run-config values, every data format)
ends in one clean line naming the culprit: never a traceback, never silently accepted, nothing
written."""

import pytest

from tests.fuzz_corpus import CASES, outcome

pytestmark = pytest.mark.slow  # engine runs / subprocesses: not in the fast lane


def test_the_corpus_is_large_and_covers_every_entry_point():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)) and len(names) >= 200
    for part in (
        "flag",
        "run-config",
        "driving csv",
        "driving npz",
        "sullychen",
        "gridworld .mat",
        "GML",
        "R2R",
        "connectivity",
        "regions",
        "objects",
        "vocab",
        "feature TSV",
        "checkpoint",
    ):
        assert sum(n.startswith(part) for n in names) >= 3, part


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_malformed_input_gets_one_clean_line(case, tmp_path):
    kind, detail = outcome(case, tmp_path)
    assert kind == "clean", f"{kind}: {detail}"


def test_docs_state_the_corpus_as_it_is():
    """docs/security.md's counts are written by `python -m tests.fuzz_corpus --docs`."""
    from tests.fuzz_corpus import DOC, doc_block

    assert doc_block().split(").")[0] in DOC.read_text(), "run python -m tests.fuzz_corpus --docs"
