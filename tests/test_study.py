"""The study runner (experiments/study.py) and the committed study files."""

import importlib
import re
from types import SimpleNamespace

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
    cells = study.cells(s, kind.crossed(s))
    assert cells
    analysis = study.analysis_of(s)
    for cell in cells:
        kind.check(cell, path)
        if hasattr(analysis, "check"):
            analysis.check(cell, path)
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
    jobs = table2.jobs(study.cells(s, table2.crossed(s)), tmp_path)
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
    for seeds in ('["0"]', "[0.5]", "[-1]"):  # each kind's cells: refused before a run starts
        for kind in ("fedrl_table1", "fedrl_table2", "driving_fedavg_fedprox"):
            text = (ROOT / "experiments" / "studies" / f"{kind}.toml").read_text()
            f.write_text(re.sub(r"\nseeds = \[[0-9, ]*\]", f"\nseeds = {seeds}", text))
            assert study.main([str(f)]) == 2
            err = capsys.readouterr().err
            assert f"{f}: grid.seeds: whole numbers" in err and err.count("\n") == 1, err
    assert study.main([str(tmp_path / "none.toml")]) == 2
    assert "none.toml" in capsys.readouterr().err


def test_a_function_study_calls_its_function_once_per_crossed_cell(tmp_path, monkeypatch):
    """The "function" kind: the crossed fields give one call each, the others are passed
    whole (a list stays a list), `work` is relative to the project unless --work says, and a
    field the function does not take is named before anything runs."""
    from experiments import function_runs, study
    from experiments.privacy import fedrl_attack

    calls = []

    def fake(sigmas, seed, rounds, steps, work):
        calls.append((tuple(sigmas), seed, rounds, steps, work))
        return [{"sigma": s, "seed": seed} for s in sigmas]

    monkeypatch.setattr(fedrl_attack, "defence_run", fake)
    s = study.load(ROOT / "experiments" / "studies" / "fedrl_attack_defence.toml")
    cells = study.cells(s, function_runs.crossed(s))
    for cell in cells:
        function_runs.check(cell, "f.toml")
    runs = function_runs.run_jobs(function_runs.jobs(cells, None), 1)
    assert [c[1] for c in calls] == [0, 1, 2] and len(runs) == 27
    assert {c[0] for c in calls} == {(0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)}
    assert {c[4] for c in calls} == {ROOT / "runs" / "fedrl_attack"}
    function_runs.run_jobs(function_runs.jobs(cells[:1], tmp_path), 1)
    assert calls[-1][4] == tmp_path
    with pytest.raises(ValueError, match="f.toml.*window"):
        function_runs.check(cells[0] | {"window": 3}, "f.toml")
    with pytest.raises(ValueError, match="grid.run"):
        function_runs.check(cells[0] | {"run": "experiments.privacy.fedrl_attack.nope"}, "f.toml")


def test_a_function_study_field_of_the_wrong_type_is_one_line_before_anything_runs(
    tmp_path, capsys
):
    """A field is checked against the type its function names: a quoted number, a fraction
    where a count goes, true for a number, text where a list goes were each a traceback
    inside a run (after the runs before it had trained)."""
    from experiments import study

    text = (ROOT / "experiments" / "studies" / "fedvln_appearance.toml").read_text()
    bad = tmp_path / "fedvln_appearance.toml"
    for old, new, said in (
        ("iters = 3000", 'iters = "3000"', "grid.iters = '3000': a whole number expected"),
        ("patience = 6", "patience = 6.5", "grid.patience = 6.5: a whole number expected"),
        ("strength = [0.0, 1.0]", "strength = [0.0, true]", "grid.strength = True: a number"),
        ('work = "runs/fedvln-appearance"', "work = 1", "grid.work = 1: a path expected"),
    ):
        bad.write_text(text.replace(old, new))
        assert study.main([str(bad), "--work", str(tmp_path / "w")]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and said in err and err.count("\n") == 1, err
    pipeline = (ROOT / "experiments" / "studies" / "fedvln_pipeline.toml").read_text()
    bad.write_text(pipeline.replace('stages = ["agent"', 'stages = "agent" # ['))
    assert study.main([str(bad)]) == 2
    assert "grid.stages = 'agent': a list of text expected" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_a_run_config_value_of_the_wrong_type_is_one_line_before_anything_runs(tmp_path, capsys):
    """A run-config value the app would refuse (text for a count, true for a rate) is named
    with the study file before the first run starts, not when its own run reaches it (after
    the runs before it trained): simulation and FedRL kinds alike."""
    from experiments import study

    studies = ROOT / "experiments" / "studies"
    bad = tmp_path / "cdl_noniid.toml"
    for name, old, new, said in (
        ("cdl_noniid", '"driving.non-iid" = 0.5', '"driving.non-iid" = "half"', "driving.non-iid"),
        ("cdl_noniid", '"driving.train-per-silo" = 150', '"driving.train-per-silo" = 1.5',
         "driving.train-per-silo"),
        ("fedrl_sweep_eps-decay", '"fedrl.envs" = 32', '"fedrl.envs" = true', "fedrl.envs"),
    ):  # fmt: skip
        text = (studies / f"{name}.toml").read_text()
        assert old in text, (name, old)
        bad = tmp_path / f"{name}.toml"
        bad.write_text(text.replace(old, new))
        assert study.main([str(bad), "--work", str(tmp_path / "w")]) == 2
        err = capsys.readouterr().err
        assert f"{bad}: grid.run-config:" in err and said in err and err.count("\n") == 1, err
    assert not (tmp_path / "w").exists()


def test_a_sweep_whose_knob_is_not_what_its_arms_vary_is_refused_before_it_trains(tmp_path, capsys):
    """A review found a sweep study with a wrong or missing `[report] knob` trained every run
    and then failed (or grouped by a constant); and a misspelt map split was dropped silently."""
    from experiments import study

    studies = ROOT / "experiments" / "studies"
    bad = tmp_path / "sweep.toml"
    bad.write_text(
        (studies / "fedrl_sweep_history.toml").read_text().replace('"history"', '"updates"')
    )
    assert study.main([str(bad)]) == 2
    assert "report.knob = 'updates'" in capsys.readouterr().err
    bad.write_text((studies / "fedrl_table1.toml").read_text() + 'maps = { vaild = "6400-6799" }\n')
    assert study.main([str(bad)]) == 2
    assert "grid.maps" in capsys.readouterr().err


def test_a_throughput_setting_that_sees_other_data_is_refused_before_it_trains(tmp_path, capsys):
    """The throughput study compares exchange settings at the same number of transitions: an
    arm whose rounds x B x S differs, or a timing too short to have rounds 3 .. R-1, is refused
    naming the field, before any run trains."""
    from experiments import study

    text = (ROOT / "experiments" / "studies" / "fedrl_throughput.toml").read_text()
    bad = tmp_path / "fedrl_throughput.toml"
    bad.write_text(text.replace("rounds = 100", "rounds = 200"))
    assert study.main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert "grid.arms: 256,1,128 runs 200 rounds x 256 transitions" in err, err
    bad.write_text(text.replace("timing-rounds = 12", "timing-rounds = 3"))
    assert study.main([str(bad)]) == 2
    assert "report.timing-rounds" in capsys.readouterr().err


def test_a_simulation_study_launches_each_cell_in_its_own_folder(tmp_path, monkeypatch):
    """The "simulation" kind: methods x seeds each one simulate() launch (simulation.py) in
    <work>/<label or method>-s<seed>, its run-config table passed as the --run-config text
    Flower's parser reads back to the same values; two runs sharing a folder, a run count
    that is not a whole number, or a missing work folder are refused before anything runs."""
    from config.schema import parse_overrides
    from experiments import simulation_runs, study

    f = tmp_path / "s.toml"
    f.write_text(
        'name = "x"\nruns = "simulation"\nanalysis = "experiments.cdl.fedavg_fedprox"\n'
        '[grid]\nmethods = ["fedavg", "fedprox"]\nseeds = [0, 1]\nrounds = 2\nnum-clients = 3\n'
        'work = "runs/x"\nrun-config = { "driving.lr" = 0.05, "driving.image-size" = 32 }\n'
    )
    s = study.load(f)
    cells = study.cells(s, simulation_runs.crossed(s))
    for cell in cells:
        simulation_runs.check(cell, f)
    launched = []

    def fake(method, run_dir, *, rounds, seed, num_clients, topology, run_config, policy):
        assert policy is None  # the study names none
        launched.append((method, run_dir, rounds, seed, num_clients, parse_overrides(run_config)))
        return run_dir

    monkeypatch.setattr(simulation_runs, "simulate", fake)
    runs = simulation_runs.run_jobs(simulation_runs.jobs(cells, tmp_path), 1)
    assert sorted((m, d.name) for m, d, *_ in launched) == [
        ("fedavg", "fedavg-s0"), ("fedavg", "fedavg-s1"),
        ("fedprox", "fedprox-s0"), ("fedprox", "fedprox-s1"),
    ]  # fmt: skip
    assert all(d.parent == tmp_path and r == 2 and n == 3 for _, d, r, _, n, _ in launched)
    assert all(cfg == {"driving.lr": 0.05, "driving.image-size": 32} for *_, cfg in launched)
    assert set(runs.run_dir) == {str(d) for _, d, *_ in launched}
    with pytest.raises(ValueError, match="share"):
        simulation_runs.jobs(cells + cells[:1], tmp_path)
    for bad in ({"rounds": 2.5}, {"num-clients": 0}, {"work": None}, {"policy": "no/such.toml"},
                {"may-stop": "yes"}):  # fmt: skip
        with pytest.raises(ValueError, match=f"{f}"):
            simulation_runs.check(cells[0] | bad, f)


def test_a_may_stop_run_its_strategy_stopped_is_kept_and_any_other_failure_stops_the_study(
    tmp_path, monkeypatch
):
    """`may-stop`: a launch that fails because no update was accepted in `max-empty-rounds`
    consecutive rounds (noise that wrecked the model) is marked stopped, its row says so, and
    it is not launched again; a launch that fails for another reason (its log says nothing of
    the kind), or one without `may-stop`, fails the study."""
    import subprocess

    from experiments import simulation_runs

    calls = []

    def fake(method, run_dir, **kw):
        calls.append(run_dir.name)
        run_dir.mkdir(parents=True, exist_ok=True)
        why = {"wrecked": "no update was accepted in 3 consecutive rounds", "crash": "Traceback"}
        if run_dir.name in why:
            (run_dir / "server.log").write_text(why[run_dir.name])
            raise subprocess.CalledProcessError(1, "simulation.py")
        return run_dir

    monkeypatch.setattr(simulation_runs, "simulate", fake)
    cell = {"method": "fedavg", "seed": 0, "rounds": 5, "run-config": {}, "may-stop": True}
    jobs = [cell | {"run_dir": str(tmp_path / n)} for n in ("fine", "wrecked")]
    runs = simulation_runs.run_jobs(jobs, 1)
    assert list(runs.stopped) == [False, True] and (tmp_path / "wrecked" / "stopped.txt").is_file()
    simulation_runs.run_jobs(jobs[1:], 1)
    assert calls == ["fine", "wrecked"]  # the stopped run is not launched again
    no_stop = {"may-stop": False, "run_dir": str(tmp_path / "again" / "wrecked")}
    for job in (cell | {"run_dir": str(tmp_path / "crash")}, cell | no_stop):
        with pytest.raises(subprocess.CalledProcessError):
            simulation_runs.run_jobs([job], 1)


def test_local_epochs_counts_rounds_to_targets_above_the_untrained_floor(tmp_path, monkeypatch):
    """experiments/fedvln/local_epochs (Tables 7-8): targets start at the highest untrained
    follower's SR (a target the floor meets would count rounds to nothing), a round count is
    the first evaluation at or above a target, a seed that never reaches one is counted as not
    reached, and best SRs are paired by seed against the smallest E and the floor."""
    import pandas as pd

    from experiments.fedvln import local_epochs as le

    rows = []
    for e, top in ((1.0, 12.0), (6.0, 20.0)):
        for seed, floor in ((0, 2.0), (1, 8.0), (2, 0.0)):
            for rnd in (2, 4, 6):
                sr = top * rnd / 6 + (seed - 1) * (e > 1)  # E = 6 by seed: -1, 0, +1
                rows.append({"E": e, "seed": seed, "round": rnd, "steps": rnd * 4 * e,
                             "val_unseen_sr": sr, "untrained_sr": floor})  # fmt: skip
    curves = pd.DataFrame(rows)
    study = {"report": {"fractions": [0.5, 1.0]}}
    assert le.targets_of(curves, study) == [10.0, 12.0]  # from 8 (seed 1's floor) to 12 (E = 1)
    assert le.targets_of(curves, {"report": {"targets": [5]}}) == [5.0]
    t = le.table(curves, [10.0, 12.0, 19.5]).set_index("E")
    assert t.loc[1.0, "target_10"] == 6 and t.loc[6.0, "target_10"] == 4  # first round >= 10
    assert t.loc[6.0, "target_19.5"] == 6 and t.loc[6.0, "target_19.5_reached"] == 2  # 19 < 19.5
    assert t.loc[1.0, "target_19.5_reached"] == 0 and pd.isna(t.loc[1.0, "target_19.5"])
    assert t.loc[6.0, "target_10_steps"] == 96 and t.loc[6.0, "steps_per_round"] == 24
    assert t.loc[6.0, "best minus smallest E [95%]"].startswith("+8.0")
    assert pd.isna(t.loc[1.0, "best minus smallest E [95%]"])  # not against itself
    assert le.targets_of(curves, {"report": {"targets": [45, 45.0, 11]}}) == [45.0, 11.0]
    assert t.loc[1.0, "best minus untrained [95%]"].startswith("+8.7")  # 12 - mean(2, 8, 0)


def test_a_study_whose_claim_fails_writes_its_results_and_exits_1(tmp_path, monkeypatch, capsys):
    """A study that checks a claim (fedrl_deployed: every engine gives the same test
    SuccRates) names it in `failure`: the runner writes the CSVs and figure, then exits 1 with
    the reason; the same study with agreeing engines exits 0."""
    import pandas as pd

    from experiments import study
    from experiments.bench import fedrl_deployed

    def fake(map_dir, size, rounds, eval_every, seed, work, succ=(0.93, 0.93)):
        return [{"engine": e, "wall_s": 10.0, **dict.fromkeys(fedrl_deployed.SCORES, s)}
                for e, s in zip(("simulation", "deployment (x)"), succ)]  # fmt: skip

    monkeypatch.setattr(study, "RESULTS", tmp_path)
    monkeypatch.setattr(fedrl_deployed, "measure", fake)
    file = str(ROOT / "experiments" / "studies" / "fedrl_deployed.toml")
    args = [file, "--jobs", "1", "--work", str(tmp_path)]
    assert study.main(args) == 0
    monkeypatch.setattr(fedrl_deployed, "measure", lambda **kw: fake(**kw, succ=(0.93, 0.92)))
    assert study.main([*args, "--force"]) == 1
    assert "different test SuccRates" in capsys.readouterr().err
    table = pd.read_csv(tmp_path / "fedrl_deployed.csv")
    assert not table["same_succ_rates"].any() and (tmp_path / "fedrl_deployed.png").is_file()


def test_a_run_that_finds_its_input_missing_stops_the_study_in_one_line(tmp_path, capsys):
    """A function run that raises ValueError (envs.errors.DataError is one: another study's
    runs or a data folder missing) stops the study with one line naming the study file and
    the reason, exit 2, no traceback; what finished before is kept by the runs themselves."""
    from experiments import study

    f = tmp_path / "s.toml"
    f.write_text(
        'name = "s"\nruns = "function"\nanalysis = "tests.test_study:A_STUDY"\n'
        '[grid]\nrun = "tests.test_study.needs_a_folder"\ncross = ["seed"]\nseed = [0]\n'
        f'folder = "{tmp_path / "none"}"\n'
    )
    assert study.main([str(f), "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"study: {f}: {tmp_path / 'none'}: no such folder (every finished run is kept)"


A_STUDY = SimpleNamespace(  # the analysis of the study above: it never gets to report
    outputs=lambda study: [], report=lambda runs, study, command: "", replot=lambda study: 0
)


def needs_a_folder(seed: int, folder: str) -> list[dict]:
    """A study's run that refuses a missing input (the test above)."""
    from envs.errors import DataError

    raise DataError(f"{folder}: no such folder")


def test_a_study_missing_another_studys_runs_is_refused_before_anything_trains(tmp_path, capsys):
    """`needs`: a study that reads another study's runs (here the augment-lr study, the
    pipeline's agent stages) checks every cell's input before the first run starts, and says
    in one line which field, which folder and which study makes it."""
    from experiments import study

    text = (ROOT / "experiments" / "studies" / "fedvln_finetune_lr.toml").read_text()
    f = tmp_path / "s.toml"
    f.write_text(
        text.replace('name = "fedvln_finetune_lr"', 'name = "x_finetune_lr"').replace(
            'pipeline-work = "runs/fedvln"', f'pipeline-work = "{tmp_path / "pipe"}"'
        )
    )
    assert study.main([str(f), "--work", str(tmp_path / "work")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"study: {f}: grid.pipeline-work: {tmp_path / 'pipe'}")
    assert "fedvln_pipeline.toml" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "work").exists()


def test_the_first_failed_run_stops_the_runs_queued_behind_it():
    """experiments.simulate.in_parallel: a run that fails stops the study once the runs under
    way finish; none queued behind it starts (a missing input found by the first cell must not
    wait for hours of other cells)."""
    import time

    from experiments.simulate import in_parallel

    started = []

    def run(k):
        started.append(k)
        if k == 0:
            raise ValueError("no such folder")
        time.sleep(0.05)
        return k

    with pytest.raises(ValueError, match="no such folder"):
        in_parallel(run, list(range(20)), 2, "t")
    assert len(started) <= 3, started
    assert in_parallel(lambda k: k * 2, [1, 2, 3], 2, "t") == [2, 4, 6]
