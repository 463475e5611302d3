"""Evaluation: the harness that plays a checkpoint against a baseline, its confidence intervals, the
``unstable play`` games, and the population evaluation (the cross-play table of a pool, its meta-game
solvers and the league table)."""
