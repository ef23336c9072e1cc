import subprocess

import pandas as pd
import pytest

from config.methods import METHODS
from server.plots import plot_runs
from tests.conftest import PYTHON, ROOT


def _run_dir(path, method, rmse):
    path.mkdir()
    (path / "config.json").write_text(f'{{"method": "{method}"}}')
    pd.DataFrame(
        {
            "round": [1, 2],
            "stage": ["train"] * 2,
            "wall_s": [1.0, 0.5],
            "bytes_up": [10, 10],
            "n_clients": [3, 3],
            "val_unseen_n": [40, 40],
            "rmse": rmse,
            "status_note": ["a", "b"],
        }
    ).to_csv(path / "rounds.csv", index=False)
    return path


def test_one_png_per_metric_overlaying_runs_and_none_for_bookkeeping(tmp_path):
    a = _run_dir(tmp_path / "a", "fedavg", [0.3, 0.2])
    b = _run_dir(tmp_path / "b", "fedprox", [0.25, 0.15])
    written = plot_runs([a, b], tmp_path / "plots")
    # the headline figure, then one per metric: not wall time, bytes or counts
    assert [p.name for p in written] == ["summary.png", "rmse.png"]
    assert all(p.stat().st_size > 1000 for p in written)


def test_a_metric_equal_to_another_is_not_plotted_twice(tmp_path):
    a = _run_dir(tmp_path / "a", "fedavg", [0.3, 0.2])
    df = pd.read_csv(a / "rounds.csv")
    df["silo_rmse_mean"] = df["rmse"]  # FedAvg: every silo evaluates the same global model
    df["mae"] = [0.2, 0.1]
    df.to_csv(a / "rounds.csv", index=False)
    names = [p.name for p in plot_runs([a], tmp_path / "plots")]
    assert names == ["summary.png", "rmse.png", "mae.png"]


def test_titles_say_what_on_what_with_units_and_full_names():
    from server.plots import meaning_of

    assert meaning_of("rmse") == ("steering RMSE, global model on the pooled test set", "rad")
    # CDL has no global model; its own figures carry a meaning and a unit (issue 45)
    assert "silos' models" in meaning_of("avg_mae")[0] and meaning_of("avg_mae")[1] == "rad"
    assert meaning_of("cd_grad_ratio")[1] == "ratio" and meaning_of("pb_entropy")[1] == "nats"
    assert "own test set" in meaning_of("silo_mae_own_mean")[0]
    # FedRL's titles name the split and the checkpoint
    assert "(valid split, test noise on)" in meaning_of("valid-succ-rate-test_noise=on")[0]
    assert "kept checkpoint" in meaning_of("best-test-succ-rate-test_noise=off")[0]
    what, unit = meaning_of("val_unseen_ndtw")
    assert what.startswith("normalised dynamic time warping") and "val unseen" in what
    assert unit == "%"
    assert "test noise off" in meaning_of("alpha-test-succ-rate-test_noise=off")[0]
    # training episodes are epsilon-greedy and counted when they end, not "the greedy policy"
    train = meaning_of("train-succ-rate")[0]
    assert (
        "epsilon-greedy" in train
        and "ended in the round" in train
        and " greedy policy" not in train
    )


def test_overlaying_runs_of_different_configs_warns_key_by_key(tmp_path):
    a = _run_dir(tmp_path / "a", "fedavg", [0.3, 0.2])
    b = _run_dir(tmp_path / "b", "fedavg", [0.25, 0.15])
    (b / "config.json").write_text('{"method": "fedavg", "driving.data-dir": "/data/udacity"}')
    res = subprocess.run(
        [PYTHON, "-m", "experiments.plot", str(a), str(b), "--out", str(tmp_path / "p")],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert res.returncode == 0 and "configs differ" in res.stderr
    assert "driving.data-dir: - | /data/udacity" in res.stderr


def test_cli_reports_missing_run(tmp_path):
    res = subprocess.run(
        [PYTHON, "-m", "experiments.plot", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 2 and "rounds.csv: not found" in res.stderr


def test_a_one_round_metric_gets_integer_round_ticks():
    import matplotlib.pyplot as plt

    from server.plots import _draw

    fig, ax = plt.subplots()
    _draw(ax, [("run", pd.DataFrame({"round": [1], "rmse": [0.2]}), "fedavg")], "rmse")
    assert list(ax.get_xticks()) == [1]
    plt.close(fig)


TINY = {
    "driving": {"driving.image-size": 24, "driving.train-per-silo": 16,
                "driving.test-per-silo": 8, "driving.batch-size": 8, "num-clients": 3,
                "topology": "ring"},
    "vln": {"num-clients": 5, "fedvln.train-houses": 3, "fedvln.unseen-houses": 2,
            "fedvln.embedding": 16, "fedvln.hidden": 32, "fedvln.batch-size": 8,
            "fedvln.max-local-steps": 2, "fedvln.seen-rate": 1.0},
    "gridworld": {"fedrl.warmup": 32, "fedrl.envs": 8, "fedrl.act-steps": 2,
                  "fedrl.updates": 3, "fedrl.batch-size": 8, "fedrl.eval-episodes": 6,
                  "fedrl.max-steps": 6, "fedrl.target-update": 2, "eval-every": 1},
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("method", list(METHODS))
def test_every_column_a_method_writes_has_a_title_and_a_unit(tmp_path, method):
    """One small run of each method; every column of its rounds.csv that is plotted says what
    is measured on what, with a unit, and no title of its figures overlaps (issue 45)."""
    from clients.app import app
    from config import parse
    from config.methods import get, server_module
    from config.schema import merged
    from server.plots import is_bookkeeping, meaning_of
    from tests.conftest import InProcessGrid

    domain = get(method).domain
    cfg = merged({**TINY[domain], "method": method, "num-server-rounds": 2,
                  "out-dir": str(tmp_path / "run")})  # fmt: skip
    nodes = 2 if domain == "gridworld" else int(cfg["num-clients"])
    server_module(method).run(InProcessGrid(app, cfg, nodes), parse(cfg), method)
    columns = pd.read_csv(tmp_path / "run" / "rounds.csv").columns
    plotted = [c for c in columns if not is_bookkeeping(c)]
    assert plotted
    untitled = [(c, meaning_of(c, method)) for c in plotted if not all(meaning_of(c, method))]
    assert not untitled, untitled
    # and every figure of the run: no title runs into another title, into another plot (its
    # tick labels and axis labels included), or into the figure's own title
    import matplotlib.figure

    from server.plots import plot_runs

    save, figures = matplotlib.figure.Figure.savefig, []

    def checked(fig, *args, **kwargs):
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        axes = [ax for ax in fig.axes if ax.axison]
        for ax in axes:
            title = ax.title.get_window_extent(r)
            for other in axes:
                if other is not ax:
                    assert not title.overlaps(other.get_tightbbox(r)), (method, ax.get_title())
            if fig._suptitle is not None:
                assert not title.overlaps(fig._suptitle.get_window_extent(r)), ax.get_title()
        figures.append(fig)
        return save(fig, *args, **kwargs)

    matplotlib.figure.Figure.savefig = checked
    try:
        written = plot_runs([tmp_path / "run"], tmp_path / "plots")
    finally:
        matplotlib.figure.Figure.savefig = save
    assert len(figures) == len(written) > 1


def test_a_fedrl_run_on_the_papers_maps_draws_the_papers_values_and_others_do_not(tmp_path):
    """Issue 66: a run plot carries the paper's value where the paper has one. A FedRL run on
    the paper's 8x8 maps under its rules draws Table 1's FedRL-1 and FedRL-2 test SuccRate on
    every test score (either checkpoint, either test noise), not on valid; the same run on
    generated maps, or under the reference's rules, draws none; Text2Action on CT draws Table
    2's F1; no paper column becomes a plot of its own."""
    import json

    import matplotlib.pyplot as plt

    from config.schema import defaults
    from server.plots import _draw, load_rounds, with_paper

    def run(name, **cfg):
        d = tmp_path / name
        d.mkdir()
        df = pd.DataFrame({"round": [1, 2], "best-test-succ-rate-test_noise=on": [0.5, 0.6],
                           "test-succ-rate-test_noise=off": [0.4, 0.5],
                           "valid-succ-rate-test_noise=on": [0.3, 0.7], "test-f1": [0.5, 0.6]})  # fmt: skip
        df.to_csv(d / "rounds.csv", index=False)
        (d / "config.json").write_text(json.dumps({**defaults(), "method": "fedrl", **cfg}))
        return d

    def lines(d, metric):
        fig, ax = plt.subplots()
        df = with_paper(load_rounds(d), json.loads((d / "config.json").read_text()))
        _draw(ax, [("run", df, "fedrl")], metric)
        out = {line.get_label(): line.get_ydata()[0] for line in ax.get_lines()}
        plt.close(fig)
        return {k: v for k, v in out.items() if k.startswith("paper")}

    paper = run("paper", **{"fedrl.map-file": "/data/gridworld_o_8.mat", "fedrl.rules": "paper"})
    want = {"paper (fedrl-1): 0.9252": 0.9252, "paper (fedrl-2): 0.9506": 0.9506}
    assert lines(paper, "best-test-succ-rate-test_noise=on") == pytest.approx(want)
    assert lines(paper, "test-succ-rate-test_noise=off") == pytest.approx(want)
    assert lines(paper, "valid-succ-rate-test_noise=on") == {}  # the paper reports test
    generated = run("generated", **{"fedrl.map-file": "", "fedrl.rules": "paper"})
    assert lines(generated, "best-test-succ-rate-test_noise=on") == {}
    reference = run("ref", **{"fedrl.map-file": "/d/gridworld_o_8.mat", "fedrl.rules": "reference"})
    assert lines(reference, "best-test-succ-rate-test_noise=on") == {}
    t2a = run("t2a", **{"fedrl.domain": "text2action", "fedrl.t2a-dataset": "cooking"})
    assert lines(t2a, "test-f1") == pytest.approx(
        {"paper (fedrl-1): 0.8505": 0.8505, "paper (fedrl-2): 0.8492": 0.8492}
    )
    names = [p.name for p in plot_runs([paper], tmp_path / "plots")]
    assert names and not [n for n in names if n.startswith("paper")]
