"""Experiment scripts (one per paper table/figure) and plotting."""
