"""The keys of the train/evaluate exchange that the server and every node agree on, in one
place: the server's config record (`config`) and a node's metric record (`metrics`). A key used
by both sides is named here and nowhere else as a string (tests/test_layout.py checks it);
FedRL's and FedVLN's arrays and steps live in contracts/fedrl.py and contracts/fedvln.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # no flwr at run time: training/ reads these keys too
    from flwr.app import Message

# --- what the server puts in a message's "config" record ---------------------------------------
SERVER_ROUND = "server-round"  # the round this message belongs to (1-based)
SAVE_STATE = "save-state"  # True: the node writes its state after this message (the round's end)
# in every train message of a chained round (FedVLN's speaker-round = "chain"): True when the
# model this node returns is the next node's starting model (its policy must allow that),
# False for the round's last node
CHAIN_ROUND = "chain-round"
# in every FedVLN train message: the fewest houses' accepted updates the server mixes into a
# model it sends on (fewer: the round is held back); a house trains only if this is at least
# its policy's fedvln.min-round-houses (clients/policy.py)
MIXES_AT_LEAST = "mixes-at-least"

# --- what a node puts in its reply's "metrics" record ------------------------------------------
NUM_EXAMPLES = "num-examples"  # the weight of the node's update in the mean (FedAvg)
TRAIN_LOSS = "train-loss"  # mean training loss of the node's local steps
FIT_S = "fit-s"  # seconds of local training
# the partition this node holds (its node config's partition-id), in a driving node's every
# train and evaluate reply: a large federation learns who is who from the replies instead of
# asking each drawn node first (strategies/screened_fedavg.py, by_node; issue 66)
HOLDS_PARTITION = "holds-partition"
DP_EPSILON = "dp-epsilon"  # local DP: the party's total epsilon after this release (clients/dp.py)
LOCAL_STEPS = "local-steps"  # optimizer steps taken (FedVLN)
NUM_AUGMENTED = "num-augmented"  # speaker-written episodes added (FedVLN augment)
CD_LOSS = "cd-loss"  # CDL's L_cd+ (Eq. 5)
# a silo's test labels: mean and mean square, for the run's constant floor (strategies/floors.py)
LABEL_MEAN = "label-mean"
LABEL_SQ_MEAN = "label-sq-mean"


def round_of(msg: Message) -> int:
    """The server round a message belongs to (0 when it carries none: a setup or query)."""
    return int(msg.content.config_records.get("config", {}).get(SERVER_ROUND, 0))


def saves_state(msg: Message) -> bool:
    """Whether the server marks this message as the end of the node's round."""
    return bool(msg.content.config_records.get("config", {}).get(SAVE_STATE, False))
