"""What simulation.py needs to run a study on this machine: a private SuperLink and the
supervision of the processes it starts (launch/superlink.py), and the end of a study's run
with the study that launched it (launch/lifetime.py)."""
