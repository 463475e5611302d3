"""Environments beyond TextArena games: single-turn datasets, collaborative and parallel environments, reward functions."""
