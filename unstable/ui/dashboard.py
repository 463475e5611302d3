"""The terminal dashboard's rendering: pure functions from the run's data to Rich renderables.

``render(info)`` draws everything; ``info`` is :meth:`Tracker.get_interface_info` (live, through
Ray) or :meth:`RunReader.info` (from a run directory), plus what the terminal adds: ``source``,
``system`` (GPU or CPU stats, see :mod:`unstable.ui.terminal_interface`), ``history``
(``collect_games``: ``[time, total]`` points; ``train/loss``: values) and ``config``. Every key is
optional: a panel without its data says "waiting for data". The layout is chosen when Rich draws
it, from the width it gets: two columns from 140 characters, one below.

Panels: inference (tokens/s, queue, batch; GPU utilisation, memory and power, or CPU and memory),
collection (games/s, per env win/draw/loss, format-ok and invalid-move rates, game length and
times; eval per opponent), learner (step, loss, grad
norm, approx KL to the behaviour policy, clip fraction, staleness, buffer fill), TrueSkill (mu
± sigma bars), match counts (heat-map of the top-N models) and action diversity; and, once a run has
logged one, the in-run exploitability of each env with the checkpoint it measured.
"""

from __future__ import annotations

import math
import time
from typing import Any

from rich.color import Color
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.panel import Panel
from rich.style import Style
from rich.table import Table
from rich.text import Text

WAITING = "waiting for data"
TWO_COLUMNS_FROM = 140
_SPARKS = "▁▂▃▄▅▆▇█"


# ----------------------------------------------------------------------------- small helpers
def fmt(value: Any, spec: str = ".2f", suffix: str = "") -> str:
    """``value`` formatted, or ``-`` when missing or not finite."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:{spec}}{suffix}"


def pct(value: Any) -> str:
    """A fraction as a whole percentage (0.25 -> ``25%``), or ``-`` when missing or not finite."""
    return fmt(None if value is None else 100 * value, ".0f", "%")


def duration(seconds: Any) -> str:
    """Whole seconds as ``1h05m`` (from an hour on) or ``4m07s``, or ``-`` when missing."""
    if seconds is None:
        return "-"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def sparkline(values: list[float], width: int = 24) -> str:
    """The last ``width`` values as a one-line chart (flat when constant)."""
    values = [v for v in values if v is not None and math.isfinite(v)][-width:]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = hi - lo or 1.0
    return "".join(_SPARKS[min(7, int((v - lo) / span * 7.999))] if hi > lo else _SPARKS[3] for v in values)


def rate(points: list[list[float]], horizon_s: float = 60.0) -> float | None:
    """Growth per second of a running total over the last ``horizon_s`` seconds of ``[time, total]`` points."""
    if len(points) < 2:
        return None
    end_t, end_n = points[-1]
    recent = [p for p in points if p[0] >= end_t - horizon_s]
    start_t, start_n = recent[0] if len(recent) > 1 else points[-2]
    return (end_n - start_n) / (end_t - start_t) if end_t > start_t else None


def short(uid: str, width: int = 16) -> str:
    """A model name that fits: the last path part, cut with an ellipsis."""
    name = uid.rstrip("/").rsplit("/", 1)[-1] or uid
    return name if len(name) <= width else name[: width - 1] + "…"


def _panel(body: Any, title: str, style: str) -> Panel:
    return Panel(body, title=f"[b]{title}[/b]", border_style=style, title_align="left")


def _waiting(title: str, style: str, why: str = "") -> Panel:
    return _panel(Text(f"{WAITING}{f' ({why})' if why else ''}", style="dim italic"), title, style)


def _table(*columns: str, left: int = 1) -> Table:
    """A borderless table; the first ``left`` columns are left-aligned, the others right-aligned."""
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i < left else "right")
    return table


def _means(info: dict, namespace: str) -> dict[str, float]:
    return (info.get("means") or {}).get(namespace) or {}


def _per_env(means: dict[str, float], namespace: str) -> dict[str, dict[str, float]]:
    """``collect/<env>/<metric>`` -> ``{env: {metric: value}}``."""
    out: dict[str, dict[str, float]] = {}
    for key, value in means.items():
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == namespace:
            out.setdefault(parts[1], {})[parts[2]] = value
    return out


# ----------------------------------------------------------------------------- panels
def header(info: dict) -> Text:
    """The top lines: run name, source (Ray or files), learner step, elapsed time, age of the last write and the
    W&B link, then the run directory and the time of day."""
    text = Text()
    text.append(" unstable ", style="bold black on bright_cyan")
    text.append(f"  run {info.get('run_name') or '?'}", style="bold")
    source = info.get("source", "ray")
    text.append(f"  [{'live via Ray' if source == 'ray' else 'from files'}]", style="cyan")
    text.append(f"  learner step {fmt(info.get('learner_step'), '.0f')}")
    text.append(f"  elapsed {duration(info.get('wall_s'))}")
    if info.get("age_s") is not None:
        age = info["age_s"]
        text.append(f"  last write {duration(age)} ago", style="yellow" if age > 60 else "dim")
    wandb = info.get("wandb") or {}
    if wandb.get("url"):
        text.append(f"  W&B {wandb['url']}", style="dim")
    text.append(f"\n {info.get('run_dir') or ''}  ·  {time.strftime('%H:%M:%S')}", style="dim")
    return text


def inference_panel(info: dict) -> Panel:
    """Tokens per second, queue, batch size and requests of each inference actor, then each GPU's and the
    machine's usage and the run's processes (the ones known)."""
    title, style = "Inference", "green"
    actors = info.get("inference") or {}
    system = info.get("system") or {}
    parts: list[Any] = []
    if actors:
        table = _table("actor", "tok/s", "queue", "batch", "requests")
        for name, s in sorted(actors.items()):
            table.add_row(name, fmt(s.get("tokens_per_second", s.get("tok_s")), ".1f"),
                          fmt(s.get("queue_size", s.get("queued")), ".0f"), fmt(s.get("mean_batch_size"), ".1f"),
                          fmt(s.get("requests"), ".0f"))
        parts.append(table)
    for gpu in system.get("gpus") or []:
        parts.append(Text(f"GPU{gpu['index']} {gpu.get('name', '')}: util {fmt(gpu.get('util'), '.0f', '%')}  "
                          f"mem {fmt(gpu.get('mem_used_gb'), '.1f')}/{fmt(gpu.get('mem_total_gb'), '.1f')} GB  "
                          f"power {fmt(gpu.get('power_w'), '.0f', ' W')}"))
    if "cpu_percent" in system:
        parts.append(Text(f"CPU {fmt(system['cpu_percent'], '.0f', '%')} of {system.get('cpus', '?')} cores  "
                          f"RAM {fmt(system.get('mem_used_gb'), '.1f')}/{fmt(system.get('mem_total_gb'), '.1f')} GB"))
    procs = system.get("procs")
    if procs:
        parts.append(Text(f"run processes: {procs['count']}  CPU {fmt(procs.get('cpu_percent'), '.0f', '%')}  "
                          f"RSS {fmt(procs.get('rss_gb'), '.2f')} GB", style="dim"))
    return _panel(Group(*parts), title, style) if parts else _waiting(title, style)


def collection_panel(info: dict) -> Panel:
    """Games played and failed and games per second, then per environment the outcome, format and invalid-move
    rates of train games and, per opponent, of eval games."""
    title, style = "Collection", "blue"
    counts = info.get("counts") or {}
    train = _per_env(_means(info, "collect"), "collect")
    evals: dict[tuple[str, str], dict[str, float]] = {}
    for key, value in _means(info, "eval").items():
        parts = key.split("/")
        if len(parts) >= 4:
            evals.setdefault((parts[1], "/".join(parts[2:-1])), {})[parts[-1]] = value
    if not train and not evals and not counts:
        return _waiting(title, style)
    failed = info.get("failed_games") or {}
    speed = rate((info.get("history") or {}).get("collect_games") or [])
    summary = Text(f"games: {counts.get('collect/games', 0)} train, {counts.get('eval/games', 0)} eval  ·  "
                   f"{fmt(speed, '.2f')} games/s  ·  failed {failed.get('collect', 0)}/{failed.get('eval', 0)}")
    parts: list[Any] = [summary]
    if train:
        table = _table("env", "games", "win", "draw", "loss", "format ok", "invalid", "length", "episode s", "gen s")
        for env, m in sorted(train.items()):
            table.add_row(env, str(counts.get(f"collect/{env}/games", "-")), pct(m.get("win_rate")),
                          pct(m.get("draw_rate")), pct(m.get("loss_rate")), pct(m.get("format_ok_rate")),
                          pct(m.get("invalid_move_rate")), fmt(m.get("game_length"), ".1f"),
                          fmt(m.get("episode_seconds"), ".2f"), fmt(m.get("gen_seconds"), ".3f"))
        parts.append(table)
    if evals:
        table = _table("eval env", "opponent", "win", "draw", "loss", "format ok", "length", left=2)
        for (env, opponent), m in sorted(evals.items()):
            table.add_row(env, short(opponent, 24), pct(m.get("win_rate")), pct(m.get("draw_rate")),
                          pct(m.get("loss_rate")), pct(m.get("format_ok_rate")), fmt(m.get("game_length"), ".1f"))
        parts.append(table)
    return _panel(Group(*parts), title, style)


def exploitability_panel(info: dict) -> Panel | None:
    """The latest in-run exploitability of each env (``eval/<env>/exploitability``, see
    :mod:`unstable.eval.in_run`) with the checkpoint it measured; ``None`` (no panel) until there is one."""
    latest = info.get("latest") or {}
    envs = sorted(k[len("eval/"):-len("/exploitability")] for k in latest
                  if k.startswith("eval/") and k.endswith("/exploitability") and k.count("/") == 2)
    if not envs:
        return None
    measured = info.get("measured_at") or {}
    table = _table("env", "checkpoint", "exploitability", "first · second", "other mass", "took")
    for env in envs:
        key = f"eval/{env}/exploitability"
        step = measured.get(key)
        table.add_row(env, "-" if step is None else f"ckpt-{step}", fmt(latest[key], ".4f"),
                      f"{fmt(latest.get(f'{key}_first'), '.3f')} · {fmt(latest.get(f'{key}_second'), '.3f')}",
                      fmt(latest.get(f"{key}_other_mass"), ".3f"), fmt(latest.get(f"{key}_wall_s"), ".0f", " s"))
    note = Text("exact best response to the checkpoint's policy: 0 = unexploitable; TicTacToe scores in [-1, 1], "
                "KuhnPoker chips per hand; first/second: the policy moving first/second", style="dim")
    return _panel(Group(table, note), "Exploitability (in-run)", "bright_red")


def model_names(info: dict) -> list[str]:
    """The trainable models of a run with several (from its config); empty for a one-model run."""
    models = (info.get("config") or {}).get("models")
    names = [m.get("name") for m in models if isinstance(m, dict)] if isinstance(models, list) else []
    return names if len(names) > 1 and all(isinstance(n, str) for n in names) else []


def model_view(info: dict, model: str) -> dict:
    """``info`` as one model of several sees it: its ``<model>/train/...`` and ``<model>/buffer/...``
    metrics under the plain names the learner panel reads."""
    prefix = f"{model}/"

    def strip(d: dict) -> dict:
        return {k[len(prefix):]: v for k, v in (d or {}).items() if k.startswith(prefix)}

    means = strip((info.get("means") or {}).get(model, {}))
    return {**info, "latest": strip(info.get("latest")), "buffer": {}, "history": strip(info.get("history")),
            "means": {ns: {k: v for k, v in means.items() if k.startswith(f"{ns}/")} for ns in ("train", "buffer")},
            "learner_step": None}


def learner_panel(info: dict, model: str | None = None) -> Panel:
    """The learner and its buffer; with ``model``, that model's of several."""
    title, style = ("Learner" if model is None else f"Learner: {model}"), "magenta"
    if model is not None:
        info = model_view(info, model)
    latest = info.get("latest") or {}
    train = {**_means(info, "train"), **{k: v for k, v in latest.items() if k.startswith("train/")}}
    buffer = {**_means(info, "buffer"), **(info.get("buffer") or {})}
    buffer.update({k: v for k, v in latest.items() if k.startswith("buffer/")})
    if not train and not buffer:
        return _waiting(title, style, "no learner step yet")
    history = info.get("history") or {}
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column(style="magenta")
    step = train.get("train/version", info.get("learner_step"))
    table.add_row("step", fmt(step, ".0f"), "")
    for label, key, spec in (("loss", "train/loss", ".4f"), ("grad norm", "train/grad_norm", ".3f"),
                             ("approx KL", "train/approx_kl", ".2e"), ("clip frac", "train/clipfrac", ".3f")):
        table.add_row(label, fmt(train.get(key), spec), sparkline(history.get(key) or []))
    table.add_row("staleness", f"{fmt(train.get('train/staleness_mean'), '.2f')} (max "
                  f"{fmt(train.get('train/staleness_max'), '.0f')})", "")
    table.add_row("lr", fmt(train.get("train/lr"), ".2e"), "")
    table.add_row("update", fmt(train.get("train/update_seconds"), ".1f", " s"), "")
    size = buffer.get("buffer/size")
    config = info.get("config") or {}
    capacity = _buffer_capacity(config, model)
    fill = size / capacity if size is not None and capacity else None
    table.add_row("buffer", f"{fmt(size, '.0f')} / {capacity or '?'}", _bar(fill, 20) if fill is not None else "")
    table.add_row("added · stale", f"{fmt(buffer.get('buffer/added'), '.0f')} · "
                  f"{fmt(buffer.get('buffer/dropped_stale'), '.0f')}", "")
    return _panel(table, title, style)


def _buffer_capacity(config: dict, name: str | None = None) -> int | None:
    """The buffer's size from ``config.json``: nested (``models[i].buffer.size``, of the model called
    ``name``, else the first) or, from older runs, flat."""
    models = [m for m in config.get("models") or [] if isinstance(m, dict)] if isinstance(
        config.get("models"), list) else []
    model = next((m for m in models if m.get("name") == name), models[0] if models else {})
    size = (model.get("buffer") or {}).get("size") or config.get("buffer_size")
    batch = (model.get("learner") or {}).get("batch_size") or config.get("batch_size")
    return size or (2 * batch if batch else None)


def _bar(fraction: float, width: int) -> str:
    filled = max(0, min(width, round(fraction * width)))
    return "█" * filled + "░" * (width - filled) + f" {100 * fraction:.0f}%"


def _ratings(info: dict) -> dict[str, dict[str, Any]]:
    registry = info.get("registry") or {}
    return {uid: r for uid, r in (registry.get("ratings") or {}).items() if "mu" in r and "sigma" in r}


def trueskill_panel(info: dict, top: int = 12, width: int = 28) -> Panel:
    """The current checkpoint, the fixed opponents and the best other checkpoints, up to ``top`` rows."""
    title, style = "TrueSkill (mu ± sigma)", "yellow"
    ratings = _ratings(info)
    if not ratings:
        return _waiting(title, style)
    registry = info.get("registry") or {}
    currents = set((registry.get("currents") or {}).values()) | {registry.get("current")}  # every lineage's
    by_mu = sorted(ratings, key=lambda uid: (-ratings[uid]["mu"], uid))
    keep = [uid for uid in by_mu if uid in currents or ratings[uid].get("fixed")]  # always shown
    keep += [uid for uid in by_mu if uid not in keep][: max(0, top - len(keep))]
    ranked = [(uid, ratings[uid]) for uid in by_mu if uid in keep]
    lo = math.floor(min(r["mu"] - r["sigma"] for _, r in ranked)) - 1
    hi = math.ceil(max(r["mu"] + r["sigma"] for _, r in ranked)) + 1
    table = _table("model", f"{lo} … {hi}", "mu ± sigma", "games", "W/D/L", left=2)
    for uid, r in ranked:
        cells = [round((x - lo) / (hi - lo) * width) for x in (r["mu"] - r["sigma"], r["mu"], r["mu"] + r["sigma"])]
        bar = Text("█" * cells[0], style="yellow")
        bar.append("▓" * (cells[1] - cells[0]), style="yellow")
        bar.append("░" * (cells[2] - cells[1]), style="dim yellow")
        wdl = "/".join(str(r[k]) for k in ("wins", "draws", "losses")) if "wins" in r else "-"
        name = Text(short(uid, 20), style="bold" if uid in currents else ("cyan" if r.get("fixed") else ""))
        table.add_row(name, bar, f"{r['mu']:.1f} ± {r['sigma']:.1f}", fmt(r.get("games"), "d"), wdl)
    return _panel(table, title, style)


def heatmap_panel(info: dict, top_n: int = 8) -> Panel:
    """How many games each pair of the ``top_n`` most-played models played against each other, shaded from none
    (dark blue) to the most (red)."""
    title, style = f"Match counts (top {top_n})", "red"
    registry = info.get("registry") or {}
    matches = registry.get("match_counts") or {}
    played = {uid: sum(row.values()) for uid, row in matches.items()}
    models = sorted((u for u in played if played[u] > 0), key=lambda u: (-played[u], u))[:top_n]
    if not models:
        return _waiting(title, style)
    peak = max(matches.get(a, {}).get(b, 0) for a in models for b in models) or 1
    table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, 1), header_style="bold")
    table.add_column("")
    for uid in models:
        table.add_column(short(uid, 9), justify="right")
    for a in models:
        row = [Text(short(a, 16), style="bold")]
        for b in models:
            n = matches.get(a, {}).get(b, 0)
            row.append(Text(str(n), style=_heat(n / peak)))
        table.add_row(*row)
    note = "" if registry.get("source") != "transcripts" else " (counted from transcripts)"
    return _panel(Group(table, Text(f"games between row and column models{note}", style="dim")), title, style)


def _heat(level: float) -> Style:
    """Dark blue (none) to red (most)."""
    r, g, b = (int(a + (z - a) * level) for a, z in zip((25, 35, 70), (220, 60, 30), strict=True))
    return Style(bgcolor=Color.from_rgb(r, g, b), color="white" if level < 0.7 else "black")


def diversity_panel(info: dict, top: int = 6) -> Panel:
    """Per environment: the actions' entropy, the share of unique moves and n-grams, and the ``top`` most
    frequent moves with their shares."""
    title, style = "Action diversity", "cyan"
    envs = info.get("diversity") or {}
    means = _per_env(_means(info, "collect"), "collect")
    if not envs and not any("action_entropy" in m for m in means.values()):
        return _waiting(title, style)
    parts: list[Any] = []
    for env in sorted(set(envs) | {e for e, m in means.items() if "action_entropy" in m}):
        d = {**means.get(env, {}), **envs.get(env, {})}
        line = Text(f"{env}", style="bold")
        line.append(f"  entropy {fmt(d.get('action_entropy'), '.2f')} nats  unique moves "
                    f"{pct(d.get('unique_action_fraction'))}  2/3/4-grams "
                    + "/".join(pct(d.get(f"unique_{n}gram_fraction")) for n in (2, 3, 4)))
        if "games" in d:
            line.append(f"  ({d['games']} games, {d.get('distinct', '?')} distinct moves)", style="dim")
        parts.append(line)
        for move, share in (d.get("top") or [])[:top]:
            parts.append(Text(f"  {short(str(move), 14):<14} {_bar(share, 16)}"))
    return _panel(Group(*parts), title, style)


# ----------------------------------------------------------------------------- layout
class Dashboard:
    """All panels, stacked below :data:`TWO_COLUMNS_FROM` characters, paired side by side from there."""

    def __init__(self, info: dict[str, Any]):
        self.info = info

    def rows(self) -> list[tuple[Panel, ...]]:
        """The panels in display order, grouped in rows of one or two (a row of two is side by side only on a wide
        terminal)."""
        i = self.info
        learners = [learner_panel(i, name) for name in model_names(i)] or [learner_panel(i)]
        panels = [inference_panel(i), *learners]  # a learner panel per model, two to a row
        exploitability = exploitability_panel(i)  # only once the metric exists
        return [*(tuple(panels[k:k + 2]) for k in range(0, len(panels), 2)), (collection_panel(i),),
                *([(exploitability,)] if exploitability is not None else []),
                (trueskill_panel(i), heatmap_panel(i)), (diversity_panel(i),)]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield header(self.info)
        wide = options.max_width >= TWO_COLUMNS_FROM
        for row in self.rows():
            if len(row) == 1 or not wide:
                yield from row
                continue
            grid = Table.grid(expand=True)
            for _ in row:
                grid.add_column(ratio=1)
            grid.add_row(*row)
            yield grid


def render(info: dict[str, Any] | None) -> Dashboard:
    """The whole dashboard for ``info`` (``None`` or ``{}`` renders every panel as "waiting for data")."""
    return Dashboard(info or {})
