"""The top-level run-config keys every method reads (rounds, clients, seed, timeouts,
robust aggregation, topology)."""

from __future__ import annotations

from dataclasses import dataclass

from config.schema import DAY_S, Section, setting

MIN_TIMEOUT_S = 0.01  # a shorter timeout cannot be met (1e-300 was accepted, issue 42)

AGGREGATORS = ("mean", "median", "trimmed-mean")  # strategies/robust.py


@dataclass(frozen=True)
class RunSettings(Section):
    title = "Every method"

    method: str = setting("the method to run (`python simulation.py --help` lists them)")
    num_server_rounds: int = setting(
        "server rounds; 0 = the method's default: 5, but 180 for FedVLN's speaker stage under "
        "the cpu recipe (config/fedvln_recipe.py)",
        lo=0,
        hi=10**5,
    )
    num_clients: int = setting(
        "nodes the server waits for; `flwr run` follows the federation's size for the "
        "driving methods (simulation.py sets it)",
        lo=1,
        hi=10**6,
    )
    partition_sampling_max: int = setting(
        "up to this many clients a round's silos are drawn by partition id (same seed, same "
        "silos; every node is asked its partition at the start, which Flower's simulation "
        "engine pays for as clients x clients); above it the draw is over the connected nodes "
        "and no node is asked: each reply says its partition (start-up linear in the clients)",
        lo=0,
        hi=10**6,
    )
    fraction_train: float = setting("share of clients trained per round", lo=0, hi=1, lo_open=True)
    fraction_evaluate: float = setting(
        "share of clients (FedVLN: of evaluation houses) scored in an evaluating round, "
        "the last included",
        lo=0,
        hi=1,
        lo_open=True,
    )
    max_evaluate_clients: int = setting(
        "> 0: score at most this many clients per evaluating round (a seeded sample)",
        lo=0,
        hi=10**7,
    )
    seed: int = setting("seed of sampling, initialisation and data", lo=0, hi=2**32 - 1)
    out_dir: str = setting('absolute path; "" = runs/<method>-<time> under the server\'s cwd')
    plots: bool = setting(
        "the ServerApp writes out-dir/plots (summary.png and one PNG per metric) when the run "
        "ends (simulation.py --no-plots sets false)"
    )
    resume: bool = setting(
        "true: go on after the last round finished in out-dir (simulation.py --resume DIR)"
    )
    resume_round: int = setting(
        "with resume: that last round (simulation.py sets it; clients reload their state as of it)",
        lo=0,
        hi=10**5,
    )
    node_wait_timeout: float = setting(
        "seconds to wait for num-clients nodes before failing, and for a node that stays "
        "silent after the others answered (strategies/nodes.py Patience)",
        lo=MIN_TIMEOUT_S,
        hi=7 * DAY_S,
    )
    node_start_timeout: float = setting(
        "seconds to wait for the first node's first answer: a federation still starting "
        "(Ray's actors, the app's imports; minutes on a busy machine) is not a dead one",
        lo=MIN_TIMEOUT_S,
        hi=7 * DAY_S,
    )
    node_return_timeout: float = setting(
        "seconds a round waits for its silos when no node holding one is online, before "
        "it counts as empty (strategies/nodes.py wait_for_return)",
        lo=0,
        hi=7 * DAY_S,
    )
    round_timeout: float = setting(
        "seconds to wait for the replies of one round: the ceiling, and round 1's limit",
        lo=MIN_TIMEOUT_S,
        hi=7 * DAY_S,
    )
    timeout_factor: float = setting(
        "later exchanges wait at most this x the slowest complete one of their kind "
        "(strategies/timeouts.py); 0 = always round-timeout",
        lo=0,
        hi=1000,
    )
    timeout_floor: float = setting(
        "the least any later exchange waits (s), whatever timeout-factor gives",
        lo=MIN_TIMEOUT_S,
        hi=DAY_S,
    )
    aggregator: str = setting(
        "fedavg/fedprox/cdl-sfl: example-weighted mean (FedAvg) or a coordinate-wise robust "
        "rule (strategies/robust.py)",
        choices=AGGREGATORS,
    )
    trim_fraction: float = setting(
        "trimmed-mean: cut this share of values at each end of every coordinate", lo=0, hi=0.49
    )
    max_update_norm: float = setting(
        "> 0: reject an update whose L2 distance from the global model exceeds this",
        lo=0,
        hi=1e12,
    )
    max_empty_rounds: int = setting(
        "fail the run after this many consecutive rounds with no accepted update", lo=1, hi=10**5
    )
    client_threads: int = setting("torch threads per ClientApp", lo=1, hi=1024)
    topology: str = setting(
        "gossip/cdl: ring | complete | <graph>-ring | <graph>-mst (strategies/topology.py)"
    )
    topology_dir: str = setting(
        'folder of GML graphs; "" = ../shared/data/topologies beside the project'
    )
    cross_eval_max_silos: int = setting(
        "decentralized: score every silo's model on every silo up to this many silos",
        lo=0,
        hi=10**4,
    )
    eval_every: int = setting(
        "evaluate every k rounds (and the last); metrics are empty in between. 0 = the "
        "method's default: every round, but every 10th for fedrl (scoring the valid maps is "
        "most of a round's time; docs/fedrl.md)",
        lo=0,
        hi=10**5,
    )

    @property
    def eval_period(self) -> int:
        """`eval-every`, or for 0 the method's default (config/methods.py `eval_every`)."""
        from config import methods

        return self.eval_every or methods.get(self.method).eval_every
