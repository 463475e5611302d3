"""Evaluation: the harness that plays a checkpoint against a baseline, its confidence intervals, and
the ``unstable play`` games."""
