"""Watching a run: the Rich dashboard and its terminal interface, game replay, and plots."""
