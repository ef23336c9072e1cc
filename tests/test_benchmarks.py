"""The benchmark studies' own logic (experiments/bench/), without their long runs: a sweep of
Flower's engine on a few nodes, ratios taken within a repeat, and the verdict on a goal."""

from __future__ import annotations

import time

import pandas as pd
import pytest
from flwr.common.config import get_project_config

from experiments.bench import engine_sweep, scale
from experiments.bench.performance_table import overhead_met
from experiments.simulate import ROOT
from experiments.tables import ratio_within_repeat


def _cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def test_an_engine_sweep_costs_more_with_messages_stored_and_start_up_parses_per_node():
    """Flower's own sweep over 2,000 registered nodes: with 10 messages stored it hands out all
    10 (one_run refuses otherwise) and walks them for every node, so it costs more CPU than the
    sweep with nothing stored."""
    from flwr.supercore.task_identity import TaskIdentity

    names = ("run_id", "node_id", "task_id")  # the sweep sets its run's; the suite's after
    kept = {n: getattr(TaskIdentity, n) for n in names}
    try:
        empty = engine_sweep.one_run(2000, 0, 3)
        stored = engine_sweep.one_run(2000, 10, 3)
    finally:
        for n, v in kept.items():
            setattr(TaskIdentity, n, v)
    assert [r["repeat"] for r in stored] == [0, 1, 2]
    table = engine_sweep.summarize(pd.DataFrame(empty + stored))
    by = table.set_index("pending")
    assert by.loc[10, "sweep_cpu_s"] > by.loc[0, "sweep_cpu_s"]
    # before it starts, the engine parses the app's pyproject.toml once per node: registering
    # 2,000 nodes costs at least half of 2,000 parses (if Flower stops, docs/performance.md's
    # account of 100,000 clients' start-up is stale)
    parse = min(_cpu(lambda: get_project_config(ROOT)) for _ in range(20))
    assert by.loc[0, "register_least"] > 0.5 * 2000 * parse
    assert by.loc[0, "ratio_to_nothing_stored"] == 1.0 and by.loc[10, "repeats"] == 3


def test_a_ratio_is_taken_within_its_repeat_so_a_slower_repeat_does_not_move_it():
    """Repeat 1 ran on a machine twice as busy: every time doubled. The ratio to the smallest
    federation is the same in both repeats; a ratio of medians across repeats would not be."""
    runs = pd.DataFrame(
        [{"repeat": k, "clients": n, "round_s": t * (1 + k)} for k in (0, 1)
         for n, t in ((10, 1.0), (1000, 3.0))]
    )  # fmt: skip
    got = ratio_within_repeat(runs, "round_s", runs.clients == 10)
    assert got[got.clients == 1000].ratio.tolist() == [3.0, 3.0]
    assert "ratio" not in runs  # the caller's frame is left as it was


@pytest.mark.parametrize(
    "ratio, goal, met",
    [(1.10, "<= 1.15", "yes"), (1.42, "<= 1.15", "no"), (1.0, "<= 1.15", "yes"),
     (0.62, "<= 1.15", "no verdict: the baseline is the slower one here"), (9.4, "", "")],
)  # fmt: skip
def test_an_overhead_below_its_baseline_gets_no_verdict_not_met(ratio, goal, met):
    assert overhead_met(ratio, goal) == met


def test_a_scale_study_that_cannot_measure_its_goal_is_refused_naming_the_field():
    cell = {"clients": [5, 100], "participants": 10, "rounds": 3, "repeats": 1}
    with pytest.raises(ValueError, match="grid.clients at least grid.participants"):
        scale.check(cell, "scale.toml")
    with pytest.raises(ValueError, match=r"grid.pending in \[0, nodes\]"):
        engine_sweep.check({"nodes": 10, "pending": 20, "repeats": 1}, "engine_sweep.toml")


def test_the_bare_loop_runs_the_real_round_in_worker_processes_and_keeps_each_nodes_state(
    tmp_path,
):
    """The round-overhead baseline (experiments/bench/round_overhead.bare_loop) is the same
    ServerApp and ClientApp with the engine taken away: its workers are processes, as Flower's
    ClientApps are, and each node's state (its optimizer and its step count) travels back from
    the worker that ran it, so round 2 starts where round 1 left it. Its losses equal the
    in-process grid's, which runs the same code in this process."""
    from clients.app import app
    from config import parse
    from config.schema import merged
    from experiments.bench.round_overhead import bare_loop
    from launch.in_process import InProcessGrid
    from server import driving_run

    small = {
        "seed": 0,
        "driving.image-size": 16,
        "driving.train-per-silo": 8,
        "driving.test-per-silo": 6,
        "driving.local-epochs": 1,
        "driving.optimizer-state": "silo",  # kept in the node's state, never sent
        "driving.lr-decay": "sqrt",  # over the silo's local steps, counted in its state
    }
    bare = bare_loop(small, rounds=2, clients=3, out=tmp_path / "bare")
    cfg = merged(
        {"method": "fedavg", "num-server-rounds": 2, "num-clients": 3,
         "out-dir": str(tmp_path / "here"), **small}
    )  # fmt: skip
    driving_run.run(InProcessGrid(app, cfg, 3), parse(cfg), "fedavg")
    here = pd.read_csv(tmp_path / "here" / "rounds.csv")
    assert len(bare) == len(here) == 2
    assert bare.train_loss.tolist() == pytest.approx(here.train_loss.tolist(), rel=1e-4)
    assert bare.rmse.tolist() == pytest.approx(here.rmse.tolist(), rel=1e-4)


def test_a_wait_on_progress_outlasts_a_slow_run_and_fails_a_stalled_one(tmp_path):
    """CI, stop 84: a deployed run slowed by a busy host (40-88 s a round) ran past a fixed
    400 s wait. A wait given the run's progress allows `timeout` without progress, not in all."""
    import threading

    from experiments.bench.loopback import Federation, wait_for

    fed, out = Federation(tmp_path), tmp_path / "out"
    log, done = tmp_path / "sn0.log", threading.Event()

    def slow_run() -> None:  # a reply every 0.2 s for 1.2 s: twice the 0.6 s allowed
        for _ in range(6):
            time.sleep(0.2)
            with open(log, "a") as f:
                f.write("INFO: Sent successfully\n")
        done.set()

    threading.Thread(target=slow_run).start()
    start = time.monotonic()
    wait_for(done.is_set, 0.6, every=0.05, what="the slow run", progress=fed.progress(out))
    assert time.monotonic() - start > 1.0
    with pytest.raises(TimeoutError, match=r"no progress \(last: \(0, 6\)\)"):
        wait_for(lambda: False, 0.6, every=0.05, what="a stalled run", progress=fed.progress(out))
    with pytest.raises(TimeoutError, match="waited 1 s for"):  # without progress: the whole time
        wait_for(lambda: False, 0.6, every=0.05, what="a run")


def test_state_transfer_carries_the_same_arrays_both_ways_and_ratios_each_size_to_the_file(
    tmp_path,
):
    """experiments/studies/state_transfer.toml: both paths hand back the arrays they were given
    (a path that dropped the state would time nothing); the summary's ratio is the context's
    time over the file's of the same size and repeat; a size of 0 is refused by field."""
    import numpy as np

    from experiments.bench import state_transfer as st

    arrays = {"a": np.arange(6, dtype=np.float32), "b": np.ones((2, 3), np.float32)}
    for got in (st.through_context(arrays), st.through_file(arrays, tmp_path / "p.npz")):
        assert got.keys() == arrays.keys()
        for k in arrays:
            np.testing.assert_array_equal(got[k], arrays[k])
    rows = st.measure(0.01, 2)
    assert {(r["path"], r["repeat"]) for r in rows} == {(p, k) for p in (st.CONTEXT, st.FILE)
                                                        for k in (0, 1)}  # fmt: skip
    runs = pd.DataFrame([{"mb": 1, "path": p, "repeat": k, "seconds": s * (1 + k)}
                         for k in (0, 1) for p, s in ((st.CONTEXT, 0.3), (st.FILE, 0.1))])  # fmt: skip
    table = st.summarize(runs).set_index("path")
    assert (
        table.loc[st.CONTEXT, "ratio_to_file"] == 3.0 and table.loc[st.FILE, "ratio_to_file"] == 1.0
    )
    with pytest.raises(ValueError, match="grid.mb"):
        st.check({"mb": 0, "repeats": 3}, "state_transfer.toml")
