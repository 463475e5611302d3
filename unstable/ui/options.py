"""Command-line options of the dashboard, shared by ``unstable dashboard`` and
``python -m unstable.terminal_interface`` (a light module: the CLI builds its parser from it at start-up)."""

from __future__ import annotations

import argparse


def add_dashboard_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The dashboard's arguments, shared by ``unstable dashboard`` and ``python -m unstable.ui.terminal_interface``."""
    parser.add_argument("run_dir", nargs="?", default=None, help="the run directory (default: live run, or newest)")
    parser.add_argument("--source", choices=("auto", "ray", "files"), default="auto")
    parser.add_argument("--address", default=None, help="Ray address (default: the local cluster)")
    parser.add_argument("--runs-dir", default="runs", help="where to look for the newest run")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between updates")
    parser.add_argument("--once", action="store_true", help="print one frame and exit")
    return parser
