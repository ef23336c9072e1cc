"""What every screened-FedAvg strategy (driving FedAvg/FedProx, FedVLN) takes from the run
config, in one place: the recorder, seed, node wait, evaluation cadence, round count, the
empty-round rule and evaluation sampling."""

from __future__ import annotations

from config import Config


def screened_args(c: Config, recorder) -> dict:
    return dict(
        recorder=recorder,
        seed=c.run.seed,
        node_wait_s=c.run.node_wait_timeout,
        node_return_s=c.run.node_return_timeout,
        eval_every=c.run.eval_period,
        num_rounds=c.run.num_server_rounds,
        max_empty_rounds=c.run.max_empty_rounds,
        min_train_nodes=1,
        min_evaluate_nodes=1,
        fraction_evaluate=c.run.fraction_evaluate,
        max_evaluate_nodes=c.run.max_evaluate_clients,
    )
