"""The study runner (experiments/study.py) and the committed study files."""

import importlib

import pytest

from tests.conftest import ROOT

STUDIES = sorted((ROOT / "experiments" / "studies").glob("*.toml"))


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_every_committed_study_file_loads_and_names_runs_its_kind_accepts(path):
    """A study file that a figure or table names is one the runner can run: it loads, every
    cell passes its kind's checks (maps, corpus, methods, run-config keys), its analysis has
    the three entry points, and its name is the results' name the docs link."""
    from experiments import study

    s = study.load(path)
    kind = importlib.import_module(study.RUNS[s["runs"]])
    cells = study.cells(s, kind.CROSSED)
    assert cells
    for cell in cells:
        kind.check(cell, path)
    analysis = importlib.import_module(s["analysis"])
    assert all(callable(getattr(analysis, f, None)) for f in ("outputs", "report", "replot"))
    assert s["name"] == path.stem
    assert any(p.is_file() for p in analysis.outputs(s)), "no committed result of this study"


def test_arms_cross_with_the_grid_and_merge_their_run_config_over_it(tmp_path):
    """An arm overrides the grid's fields and runs one cell per entry of its run-config list,
    each merged over the grid's table; list fields are crossed (Table 1's frontier shape)."""
    from experiments import study

    f = tmp_path / "s.toml"
    f.write_text(
        'name = "x"\nruns = "fedrl-gridworld"\nanalysis = "experiments.fedrl.table1"\n'
        '[grid]\nsizes = [8]\nrules = ["paper"]\nseeds = [0, 1]\nrounds = 3\n'
        'run-config = { "fedrl.envs" = 8 }\n'
        '[[grid.arms]]\nmethods = ["fedrl"]\n'
        'run-config = [{ "fedrl.sigma" = 1.0 }, { "fedrl.sigma" = 2.0, "fedrl.envs" = 4 }]\n'
        '[[grid.arms]]\nmethods = ["dqn-alpha", "random-both"]\nseeds = [0]\n'
    )
    s = study.load(f)
    cells = study.cells(
        s, {"sizes": "size", "rules": "rules", "seeds": "seed", "methods": "method"}
    )
    fed = [c for c in cells if c["method"] == "fedrl"]
    assert len(fed) == 4 and len(cells) == 6
    assert {(c["seed"], c["run-config"]["fedrl.sigma"], c["run-config"]["fedrl.envs"]) for c in fed} == {
        (0, 1.0, 8), (1, 1.0, 8), (0, 2.0, 4), (1, 2.0, 4)
    }  # fmt: skip
    assert all(c["run-config"] == {"fedrl.envs": 8} for c in cells if c["method"] != "fedrl")
    assert {c["seed"] for c in cells if c["method"] != "fedrl"} == {0}


def test_a_text2action_run_seed_is_ten_seeds_plus_its_fold(tmp_path):
    """Table 2's rows are the folds x seeds, each fold with its own run seed (10 x seed + fold),
    as the script it replaced ran them; the corpus folder is resolved from the project."""
    from experiments import study
    from experiments.fedrl import table2

    s = study.load(ROOT / "experiments" / "studies" / "fedrl_table2.toml")
    s["grid"] |= {"seeds": [0, 1], "datasets": ["win2k"], "methods": ["dqn-alpha"]}
    jobs = table2.jobs(study.cells(s, table2.CROSSED), tmp_path)
    assert sorted((j["fold"], j["seed"]) for j in jobs) == [
        (f, 10 * sd + f) for f in range(5) for sd in (0, 1)
    ]
    assert all(
        j["data"] == str((ROOT.parent / "shared" / "data" / "text2action").resolve()) for j in jobs
    )


def test_a_study_mistake_is_one_line_naming_the_file_and_field(tmp_path, capsys):
    from experiments import study

    f = tmp_path / "bad.toml"
    for text, named in (
        ("name = 1\n[grid\n", "not TOML"),
        ('name = "x"\nruns = "fedrl-gridworld"\nanalysis = "experiments.fedrl.table1"\n', "`grid`"),
        ('name = "x"\nruns = "fedrl-gridworld"\nanalysis = "experiments.nope"\n[grid]\n', "analysis"),
        ('name = "x"\nruns = "fedrl-gridworld"\nanalysis = "experiments.fedrl.table1"\nseed = 1\n'
         "[grid]\n", "unknown field(s) seed"),
    ):  # fmt: skip
        f.write_text(text)
        assert study.main([str(f)]) == 2
        err = capsys.readouterr().err
        assert str(f) in err and named in err and err.count("\n") == 1, err
    assert study.main([str(tmp_path / "none.toml")]) == 2
    assert "none.toml" in capsys.readouterr().err
