"""``unstable replay RUN_DIR [--game ID | --last N] [--env ENV]``: print a run's game transcripts readably.

Reads ``<run_dir>/games/transcripts.jsonl`` and its rotated files (see
:mod:`unstable.tracking.transcripts`), oldest first. Per game: env, id, seed, train or eval, the
learner step it was played at, each seat's policy and its reward and outcome; per turn the
observation, the completion (and with ``--prompts`` the exact prompt), the parsed action and its
flags, and the generation time and token count. Long texts keep their head and tail.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from unstable.tracking.transcripts import read_transcripts, transcript_files

DEFAULT_LAST = 3


def select(lines: list[dict[str, Any]], game: int | None = None, last: int | None = None,
           env: str | None = None) -> list[dict[str, Any]]:
    """The transcripts of game ``game``, or the ``last`` ones (default 3), optionally of one env only."""
    if env is not None:
        lines = [line for line in lines if line.get("env_id") == env]
    if game is not None:
        return [line for line in lines if line.get("game_id") == game]
    last = DEFAULT_LAST if last is None else last
    if last < 1:
        raise ValueError(f"--last must be >= 1, got {last}")
    return lines[-last:]


def clip(text: str, max_chars: int) -> str:
    """``text`` with its middle cut out if longer than ``max_chars`` (0 = no limit)."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    half = max_chars // 2
    return f"{text[:half]}\n… ({len(text) - 2 * half} characters cut) …\n{text[-half:]}"


def _seat_line(seat: dict[str, Any], line: dict[str, Any]) -> Text:
    pid = seat["player_id"]
    version = f" v{seat['version']}" if seat.get("version") is not None else ""
    text = Text(f"  P{pid} ", style="bold")
    text.append(seat["uid"], style="cyan")
    text.append(f" ({seat.get('kind', '?')}{version}{', collects data' if seat.get('collect_data') else ''})")
    if line.get("eval_player_id") == pid:
        text.append(" [evaluated]", style="magenta")
    rewards, outcomes = line.get("final_rewards") or {}, line.get("outcomes") or {}
    if str(pid) in rewards:
        reward = rewards[str(pid)]
        text.append(f"  reward {reward:+.2f}" if reward is not None else "  reward -")
        outcome = outcomes.get(str(pid), "?")
        text.append(f"  {outcome}", style={"win": "green", "loss": "red"}.get(outcome, "yellow"))
    return text


def _turn(turn: dict[str, Any], show_prompts: bool, max_chars: int) -> Group:
    head = Text(f"turn {turn['turn']}  P{turn['player_id']} ", style="bold")
    head.append(turn.get("uid", "?"), style="cyan")
    head.append(f"  {turn.get('gen_seconds', 0.0):.2f} s")
    if turn.get("completion_tokens"):
        head.append(f"  {turn['completion_tokens']} tokens")
    head.append("  action ")
    head.append(repr(turn.get("action", "")), style="bold green" if not turn.get("invalid") else "bold red")
    if not turn.get("format_ok", True):
        head.append("  bad format", style="yellow")
    if turn.get("invalid"):
        head.append(f"  INVALID{': ' + turn['invalid_reason'] if turn.get('invalid_reason') else ''}", style="red")
    parts: list[Any] = [head, Text("observation:", style="dim bold"), Text(clip(turn.get("observation", ""),
                                                                                max_chars), style="dim")]
    if show_prompts:
        parts += [Text("prompt:", style="dim bold"), Text(clip(turn.get("prompt", ""), max_chars), style="dim")]
    parts += [Text("completion:", style="bold"), Text(clip(turn.get("completion", ""), max_chars)), Text("")]
    return Group(*parts)


def render_game(line: dict[str, Any], show_prompts: bool = False, max_chars: int = 1500) -> Panel:
    """One transcript as a Rich panel (all text is shown literally, never parsed as markup)."""
    stage = "eval" if line.get("is_eval") else "train"
    title = (f"game {line.get('game_id')} · {line.get('env_id')} · seed {line.get('seed')} · {stage} · "
             f"learner step {line.get('learner_step')}")
    if line.get("wall_seconds"):
        title += f" · {line['wall_seconds']:.2f} s"
    parts: list[Any] = [_seat_line(seat, line) for seat in line.get("seats", [])]
    failure = line.get("failure")
    if failure:
        parts.append(Text(f"  FAILED in {failure['stage']}: {failure['error_type']}: {failure['message']}",
                          style="bold red"))
    parts.append(Text(f"  {line.get('num_turns', len(line.get('turns', [])))} turns", style="dim"))
    parts.append(Text(""))
    parts += [_turn(turn, show_prompts, max_chars) for turn in line.get("turns", [])]
    if line.get("game_info"):
        parts.append(Text(f"game info: {line['game_info']}", style="dim"))
    return Panel(Group(*parts), title=Text(title, style="bold"), title_align="left",
                 border_style="red" if failure else ("magenta" if stage == "eval" else "blue"))


def replay(run_dir: str | os.PathLike, game: int | None = None, last: int | None = None, env: str | None = None,
           show_prompts: bool = False, max_chars: int = 1500, console: Console | None = None) -> int:
    """Print the selected transcripts; return how many were printed."""
    if not transcript_files(run_dir):
        raise FileNotFoundError(f"no game transcripts under {run_dir} (expected games/transcripts.jsonl)")
    chosen = select(read_transcripts(run_dir), game=game, last=last, env=env)
    console = console or Console()
    for line in chosen:
        console.print(render_game(line, show_prompts=show_prompts, max_chars=max_chars))
    return len(chosen)


def run(args: argparse.Namespace) -> int:
    """``unstable replay``: exit status 0 if something was printed, 1 (and an error line on stderr,
    as the other commands write it) if the selection was empty."""
    printed = replay(args.run_dir, game=args.game, last=args.last, env=args.env, show_prompts=args.prompts,
                     max_chars=args.max_chars)
    if not printed:
        print(f"unstable replay: error: {_nothing_selected(args.run_dir, args.game, args.env)}", file=sys.stderr)
    return 0 if printed else 1


def _nothing_selected(run_dir: str | os.PathLike, game: int | None, env: str | None) -> str:
    """Why the selection is empty, with the game ids the transcripts do hold (some games' transcripts
    may not be kept: see ``TranscriptConfig.sample_rate``)."""
    what = f"game {game}" if game is not None else "games"
    ids = sorted({line.get("game_id") for line in read_transcripts(run_dir) if isinstance(line.get("game_id"), int)})
    held = f"they hold {len(ids)} games, ids {ids[0]} to {ids[-1]}" if ids else "they hold no game"
    return f"no {what}{f' of {env}' if env else ''} in the transcripts of {run_dir} ({held})"
