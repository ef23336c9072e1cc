"""clients/costs.py: a message's time split into the phases its handler names."""

import time

from clients import costs


def test_a_message_s_cost_sums_each_named_phase_and_knows_the_process_age():
    with costs.message() as first:
        with costs.phase("rebuild"):
            time.sleep(0.02)
        for _ in range(2):
            with costs.phase("work"):
                time.sleep(0.01)
    with costs.message() as second:  # phases do not carry over to the next message
        pass
    assert first["rebuild_s"] >= 0.02 and first["work_s"] >= 0.02
    assert first["handler_s"] >= first["rebuild_s"] + first["work_s"]
    assert 0 < first["process_age_s"] < 365 * 24 * 3600
    assert set(second) == {"process_age_s", "handler_s"}
