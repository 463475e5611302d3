"""``ModelRegistry``: every model that plays (learner checkpoints and fixed opponents) and its TrueSkill rating.

Rules (the seed's behaviour, minus its bugs):

* **Lineages.** Every learner checkpoint belongs to a lineage: the trainable model that produced it
  (``"model"`` unless named; a run with several trainable models has one lineage each). Each lineage
  has its own current checkpoint; all lineages and the fixed models share one TrueSkill ladder. In a
  one-model run uids are ``base``, ``ckpt-N``; with several, ``<lineage>-base``, ``<lineage>-ckpt-N``
  (see :func:`checkpoint_uid`).
* **Checkpoints.** ``add_checkpoint`` makes the new checkpoint its lineage's current. With ``inherit=True``
  it starts from that lineage's previous current mu with sigma doubled (the seed's rule), capped at the
  environment's default sigma (25/3) so a long run cannot end up *less* certain than a fresh model.
  ``path=None`` is the base model. Iterations must not go down within a lineage, so insertion order =
  iteration order.
* **Fixed models.** uid = the name itself (``"random"``, ``"google/gemini-2.0-flash-lite-001"``), not
  the seed's ``"fixed-<name>"``: the name in a spec, in the registry and on the dashboard is the same
  string. Kind (see :func:`fixed_policy_ref`): ``"scripted"`` for names in ``SCRIPTED_POLICIES``,
  ``"checkpoint"`` for an existing adapter directory, else ``"api"``.
* **Draws.** ``draw_probability=0.25`` (TrueSkill's default is 0.10): TicTacToe, SimpleTak or Nim
  between similar players draw (or split) often; a draw counts as a draw, never as a win.
* **Rating a game.** Scores become ranks (higher is better, ties share a rank); one ``TS.rate`` per
  game. A uid playing several seats is rated once, by its best seat. If every seat is the same uid
  (mirror self-play) nothing is rated: the game counts in ``games`` and ``self_games`` and on the
  diagonal of the match matrix, but no win/draw/loss. A single-seat game has no opponent and is not
  rated (the seed rated it against a dummy "env" model, mixing game difficulty into skill); its
  outcome is the sign of the score.
* **NFSP's average policy.** A seat played by a checkpoint's average policy (``PolicyRef.average_of``,
  uid ``ckpt-N/average``: :class:`~unstable.samplers.nfsp.NFSPModelSampler`) is not registered: it counts
  as that checkpoint, so a game of ``ckpt-N`` against its own average is ``ckpt-N``'s self-play (counted in
  ``games`` and ``self_games``, not rated), as a mirror game is.
* **Unknown players.** :meth:`record_game` adds a seat's policy it has not seen as a fixed model (kind
  from its :class:`~unstable.records.PolicyRef`), so eval games against an unregistered baseline are
  rated; :meth:`update_ratings` with bare uids requires them registered.

**Adapters in memory.** With an adapter store (:meth:`set_adapter_store`; the wiring gives one when
``checkpoint_transport="object_store"``), the registry hands inference actors what they need to fetch
an adapter without its files: :meth:`adapter_handle` returns the handle of the files the learner sent
with the checkpoint (``add_checkpoint(..., adapter=payload)`` puts them into the store), or reads the
files itself (past checkpoints of a resumed run, fixed adapter opponents: the registry runs where the
run directory is) and puts them there. It keeps the handles of the :data:`MAX_STORED_ADAPTERS` most
recently used adapters; an older one is read from disk again when asked for. Handles are never part
of the saved state.

``sample_opponent`` delegates to a model sampler given by :meth:`set_sampler` (which points the
sampler's ``model_registry`` at this object, so a registry actor never calls itself through Ray).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

from unstable.games.scripted_names import SCRIPTED_POLICIES
from unstable.inference.adapters import read_adapter
from unstable.records import GameRecord, PolicyKind, PolicyRef
from unstable.utils.calls import call
from unstable.utils.quiet import import_trueskill

log = logging.getLogger(__name__)

DEFAULT_DRAW_PROBABILITY = 0.25
DEFAULT_LINEAGE = "model"
"""The lineage of checkpoints registered without one (a one-model run; ``ModelConfig.name``'s default)."""
MAX_STORED_ADAPTERS = 8
"""Adapter handles the registry keeps (least recently used out): enough for the current checkpoint of
every lineage and the opponents in play; each holds an adapter's bytes in Ray's object store."""
_OUTCOMES = ("win", "draw", "loss")
_TALLY = {"win": "wins", "draw": "draws", "loss": "losses"}  # outcome -> ModelEntry counter


def fixed_policy_ref(name: str) -> PolicyRef:
    """How a fixed opponent's name is played: the one place the uid and kind rules live."""
    if name in SCRIPTED_POLICIES:
        return PolicyRef(uid=name, kind="scripted")
    if os.path.isdir(name):
        return PolicyRef(uid=name, kind="checkpoint", adapter_path=name)
    return PolicyRef(uid=name, kind="api")


def score_ranks(scores: list[float]) -> list[int]:
    """Competition ranks, 0 = best: ``[1, 0, -1, 1] -> [0, 2, 3, 0]``."""
    return [sum(other > s for other in scores) for s in scores]


def _outcome(mine: float, other: float) -> str:
    return "win" if mine > other else ("draw" if mine == other else "loss")


@dataclass
class ModelEntry:
    """One registered model: how it plays (``kind``, ``path_or_name``, ``iteration``), its TrueSkill rating
    (``mu``, ``sigma``) and its game counts (``self_games``: mirror games, not rated)."""

    uid: str
    kind: PolicyKind
    path_or_name: str | None
    iteration: int | None
    fixed: bool
    mu: float
    sigma: float
    games: int = 0
    wins: int = 0
    draws: int = 0
    losses: int = 0
    self_games: int = 0
    lineage: str | None = None  # the trainable model a learner checkpoint belongs to; None for fixed models

    def tally(self, outcome: str) -> None:
        """Add one to ``wins``, ``draws`` or ``losses`` for ``outcome`` (``"win"``, ``"draw"``, ``"loss"``)."""
        field = _TALLY[outcome]
        setattr(self, field, getattr(self, field) + 1)


class ModelRegistry:
    """See the module docstring. ``tracker`` (optional) gets :meth:`interface_info` through
    ``tracker.log_registry(info)`` after each new checkpoint and every ``log_every`` recorded games
    (the Tracker logs ``registry/<uid>/mu|sigma`` from it and keeps it for the dashboard)."""

    def __init__(self, tracker: Any = None, beta: float = 4.0,
                 draw_probability: float = DEFAULT_DRAW_PROBABILITY, log_every: int = 16):
        if not 0.0 <= draw_probability < 1.0:
            raise ValueError(f"draw_probability must be in [0, 1), got {draw_probability}")
        if log_every < 1:
            raise ValueError(f"log_every must be >= 1, got {log_every}")
        self.tracker, self.beta, self.draw_probability, self.log_every = tracker, beta, draw_probability, log_every
        self.TS = import_trueskill().TrueSkill(beta=beta, draw_probability=draw_probability)
        self._models: dict[str, ModelEntry] = {}
        self._current: dict[str, str] = {}  # lineage -> its current checkpoint, in order of first registration
        self._matches: dict[str, dict[str, int]] = {}
        self._results: dict[str, dict[str, dict[str, int]]] = {}
        self._games_recorded = 0
        self._sampler: Any = None
        self._adapter_store: Any = None
        self._adapter_handles: OrderedDict[str, Any] = OrderedDict()  # adapter path -> its handle in the store
        self._batching = self._push_due = False  # record_games: one log_registry push per batch

    # ----------------------------------------------------------------- adding models
    def _add(self, entry: ModelEntry) -> None:
        if entry.uid in self._models:
            raise ValueError(f"uid {entry.uid!r} is already registered (as {self._models[entry.uid].kind}); "
                             "uids must be unique")
        self._models[entry.uid] = entry

    def add_checkpoint(self, uid: str, path: str | None, iteration: int, inherit: bool = True,
                       lineage: str | None = None, adapter: Any = None) -> None:
        """Register a learner checkpoint of ``lineage`` (``None``: :data:`DEFAULT_LINEAGE`; ``path=None``:
        base weights) and make it that lineage's current checkpoint. ``adapter``: its files (an
        :class:`~unstable.inference.adapters.AdapterPayload`) when the learner publishes them; they go
        into the adapter store (see :meth:`adapter_handle`), if there is one."""
        if not isinstance(iteration, int) or iteration < 0:
            raise ValueError(f"iteration must be an integer >= 0, got {iteration!r}")
        lineage = DEFAULT_LINEAGE if lineage is None else lineage
        if not isinstance(lineage, str) or not lineage:
            raise ValueError(f"lineage must be a non-empty string, got {lineage!r}")
        prev = self._models.get(self._current.get(lineage, ""))
        if prev is not None and iteration < prev.iteration:
            raise ValueError(f"checkpoint {uid!r} has iteration {iteration} < current {prev.uid!r} ({prev.iteration}) "
                             f"of lineage {lineage!r}")
        mu, sigma = self.TS.mu, self.TS.sigma
        if inherit and prev is not None:
            mu, sigma = prev.mu, min(prev.sigma * 2.0, self.TS.sigma)
        self._add(ModelEntry(uid, "checkpoint", path, iteration, False, mu, sigma, lineage=lineage))
        self._current[lineage] = uid
        if adapter is not None and path is not None and self._adapter_store is not None:
            self._keep_handle(path, call(self._adapter_store, "put", adapter))
        self._push()

    def add_fixed(self, name: str, prior_mu: float = 25.0) -> str:
        """Register a fixed opponent (API model, scripted baseline, or a frozen adapter dir); returns its uid."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"fixed model name must be a non-empty string, got {name!r}")
        ref = fixed_policy_ref(name)
        self._add(ModelEntry(ref.uid, ref.kind, name, None, True, float(prior_mu), self.TS.sigma))
        return ref.uid

    def _ensure_known(self, ref: PolicyRef) -> None:
        if ref.average_of is not None:
            self._entry(ref.average_of)  # its checkpoint's: KeyError if that is unknown
            return
        if ref.uid in self._models:
            return
        log.info("registry: adding %s policy %r seen in a game as a fixed model", ref.kind, ref.uid)
        self._add(ModelEntry(ref.uid, ref.kind, ref.adapter_path or ref.uid, None, True, self.TS.mu, self.TS.sigma))

    # ----------------------------------------------------------------- rating games
    def record_game(self, record: GameRecord) -> None:
        """Rate a finished game: uids from the seats' policies, scores from ``final_rewards``."""
        agents = sorted(record.spec.agents, key=lambda a: a.player_id)
        for agent in agents:
            self._ensure_known(agent.policy)
        uids = [a.policy.average_of or a.policy.uid for a in agents]  # an average seat counts as its checkpoint
        scores = [float(record.final_rewards[a.player_id]) for a in agents]
        self.update_ratings(uids, scores, env_id=record.env_id)

    def record_games(self, records: list[GameRecord]) -> None:
        """:meth:`record_game` for each record, in order (one call for a batch of finished games); the
        tracker gets at most one ``log_registry`` snapshot for the batch, at its end, when one was due."""
        self._batching = True
        try:
            for record in records:
                self.record_game(record)
        finally:
            self._batching = False
            if self._push_due:
                self._push_due = False
                self._push()

    def update_ratings(self, uids: list[str], scores: list[float], env_id: str | None = None) -> None:
        """One game: ``uids[i]`` scored ``scores[i]``. Ratings are global; ``env_id`` is only for logs."""
        if not uids or len(uids) != len(scores):
            raise ValueError(f"need one score per seat, got uids={uids!r} scores={scores!r}")
        unknown = [u for u in uids if u not in self._models]
        if unknown:
            raise KeyError(f"unknown uids {unknown} (game in {env_id}); registered: {sorted(self._models)}")
        best: dict[str, float] = {}
        for uid, score in zip(uids, scores, strict=True):
            best[uid] = max(best.get(uid, -math.inf), float(score))
        for uid in best:
            self._models[uid].games += 1
        if len(best) == 1:
            self._record_unrated(uids[0], len(uids), best[uids[0]])
        else:
            self._rate(best)
        self._games_recorded += 1
        if self._games_recorded % self.log_every == 0:
            if self._batching:
                self._push_due = True
            else:
                self._push()

    def _record_unrated(self, uid: str, seats: int, score: float) -> None:
        entry = self._models[uid]
        if seats > 1:  # mirror self-play
            entry.self_games += 1
            row = self._matches.setdefault(uid, {})
            row[uid] = row.get(uid, 0) + 1
            return
        entry.tally(_outcome(score, 0.0))

    def _rate(self, best: dict[str, float]) -> None:
        order = list(best)
        groups = [(self.TS.create_rating(self._models[u].mu, self._models[u].sigma),) for u in order]
        rated = self.TS.rate(groups, ranks=score_ranks([best[u] for u in order]))
        for uid, (rating,) in zip(order, rated, strict=True):
            self._models[uid].mu, self._models[uid].sigma = rating.mu, rating.sigma
        for a in order:
            others = [b for b in order if b != a]
            outcome = _outcome(best[a], max(best[b] for b in others))
            self._models[a].tally(outcome)
            for b in others:
                row = self._matches.setdefault(a, {})
                row[b] = row.get(b, 0) + 1
                cell = self._results.setdefault(a, {}).setdefault(b, dict.fromkeys(_OUTCOMES, 0))
                cell[_outcome(best[a], best[b])] += 1

    # ----------------------------------------------------------------- queries
    def lineages(self) -> list[str]:
        """The lineages with checkpoints, in order of their first registration."""
        return list(self._current)

    def get_current_ckpt(self, lineage: str | None = None) -> str:
        """The current checkpoint of ``lineage`` (default: the first lineage registered)."""
        if not self._current:
            raise RuntimeError("no checkpoint registered yet; call add_checkpoint(uid='base', path=None, iteration=0)")
        if lineage is None:
            return next(iter(self._current.values()))
        if lineage not in self._current:
            raise KeyError(f"unknown lineage {lineage!r}; lineages: {self.lineages()}")
        return self._current[lineage]

    def _entry(self, uid: str) -> ModelEntry:
        if uid not in self._models:
            raise KeyError(f"unknown uid {uid!r}; registered: {sorted(self._models)}")
        return self._models[uid]

    def get_name_or_lora_path(self, uid: str) -> str | None:
        """The adapter path or model name ``uid`` plays with (``None``: a base model); ``KeyError`` if unregistered."""
        return self._entry(uid).path_or_name

    def get_model(self, uid: str) -> dict[str, Any]:
        """``uid``'s :class:`ModelEntry` as a dict; ``KeyError`` if unregistered."""
        return asdict(self._entry(uid))

    def get_all_models(self) -> list[dict[str, Any]]:
        """Every :class:`ModelEntry` as a dict, in registration order."""
        return [asdict(m) for m in self._models.values()]

    def policy_ref(self, uid: str | None = None, lineage: str | None = None) -> PolicyRef:
        """How to play ``uid`` (default: the current checkpoint of ``lineage``) as a seat."""
        entry = self._entry(self.get_current_ckpt(lineage) if uid is None else uid)
        adapter = entry.path_or_name if entry.kind == "checkpoint" else None
        return PolicyRef(uid=entry.uid, kind=entry.kind, adapter_path=adapter, version=entry.iteration,
                         lineage=entry.lineage)

    def checkpoint_uids(self, lineage: str | None = None) -> list[str]:
        """Learner checkpoints of ``lineage`` (default: of every lineage, lineage by lineage), each
        lineage's oldest first (by iteration; insertion order breaks ties)."""
        order = {name: i for i, name in enumerate(self._current)}
        ckpts = [m for m in self._models.values() if not m.fixed and lineage in (None, m.lineage)]
        return [m.uid for m in sorted(ckpts, key=lambda m: (order.get(m.lineage, 0), m.iteration))]

    def fixed_uids(self) -> list[str]:
        """The uids of the fixed opponents, in registration order."""
        return [m.uid for m in self._models.values() if m.fixed]

    def ratings(self) -> dict[str, tuple[float, float]]:
        """Each model's TrueSkill ``(mu, sigma)``, by uid."""
        return {uid: (m.mu, m.sigma) for uid, m in self._models.items()}

    def match_quality(self, uid_a: str, uid_b: str) -> float:
        """TrueSkill's draw probability between two models (1 = perfectly even)."""
        a, b = self._entry(uid_a), self._entry(uid_b)
        return self.TS.quality([(self.TS.create_rating(a.mu, a.sigma),), (self.TS.create_rating(b.mu, b.sigma),)])

    def match_qualities(self, uid: str | None = None, lineage: str | None = None) -> dict[str, float]:
        """Match quality of ``uid`` (default: the current checkpoint of ``lineage``) against every other model."""
        uid = self.get_current_ckpt(lineage) if uid is None else uid
        return {other: self.match_quality(uid, other) for other in self._models if other != uid}

    def match_counts(self) -> dict[str, dict[str, int]]:
        """``matches[a][b]``: games between a and b (the diagonal counts mirror self-play)."""
        return {a: dict(row) for a, row in self._matches.items()}

    def match_results(self) -> dict[str, dict[str, dict[str, int]]]:
        """``results[a][b] = {"win", "draw", "loss"}`` counts from a's point of view."""
        return {a: {b: dict(c) for b, c in row.items()} for a, row in self._results.items()}

    def interface_info(self) -> dict[str, Any]:
        """JSON-able snapshot for the dashboard (the shape ``Tracker.log_registry`` takes)."""
        ratings = {m.uid: {k: v for k, v in asdict(m).items() if k != "uid"} for m in self._models.values()}
        current = next(iter(self._current.values()), None)
        return {"current": current, "currents": dict(self._current), "games_recorded": self._games_recorded,
                "ratings": ratings,
                "match_counts": self.match_counts(), "match_results": self.match_results()}

    def _push(self) -> None:
        if self.tracker is not None:
            call(self.tracker, "log_registry", self.interface_info())

    # ----------------------------------------------------------------- adapters in memory
    def set_adapter_store(self, store: Any) -> None:
        """Serve adapters from ``store`` (``store.put(AdapterPayload) -> handle``; ``None``: from paths only)."""
        self._adapter_store = store
        self._adapter_handles.clear()

    def adapter_handle(self, path: str) -> Any:
        """The store's handle of the adapter at ``path`` (read and put there on first use), or ``None``
        without a store: the inference actor then loads ``path`` from its own disk."""
        if self._adapter_store is None:
            return None
        handle = self._adapter_handles.get(path)
        if handle is None:
            try:
                payload = read_adapter(path)
            except FileNotFoundError as exc:
                raise FileNotFoundError(f"{exc} on the registry's node: the registry fills the adapter store from "
                                        "the run directory, which must be on the driver's node") from None
            handle = call(self._adapter_store, "put", payload)
        self._keep_handle(path, handle)
        return handle

    def _keep_handle(self, path: str, handle: Any) -> None:
        self._adapter_handles[path] = handle
        self._adapter_handles.move_to_end(path)
        while len(self._adapter_handles) > MAX_STORED_ADAPTERS:
            self._adapter_handles.popitem(last=False)

    # ----------------------------------------------------------------- sampling delegation
    def set_sampler(self, sampler: Any) -> None:
        """Use ``sampler`` (a model sampler) for :meth:`sample_opponent`; it will read this registry."""
        sampler.model_registry = self
        self._sampler = sampler

    def sample_opponent(self, lineage: str | None = None) -> PolicyRef:
        """An opponent for ``lineage``'s current checkpoint, from the sampler set by :meth:`set_sampler`
        (``RuntimeError`` if none is set)."""
        if self._sampler is None:
            raise RuntimeError("no model sampler set; call set_sampler(sampler) first")
        return self._sampler.sample_opponent(lineage) if lineage is not None else self._sampler.sample_opponent()

    # ----------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, Any]:
        """Models, ratings, current checkpoints, game and match counts (format 2, JSON-able), for :meth:`save`."""
        return {"format": 2, "beta": self.beta, "draw_probability": self.draw_probability,
                "current": dict(self._current), "games_recorded": self._games_recorded,
                "models": self.get_all_models(), "matches": self.match_counts(), "results": self.match_results()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s snapshot (format 2; format 1, from before lineages, is read as
        one lineage, :data:`DEFAULT_LINEAGE`)."""
        if state.get("format") not in (1, 2):
            raise ValueError(f"unknown registry state format {state.get('format')!r}")
        self.beta, self.draw_probability = state["beta"], state["draw_probability"]
        self.TS = import_trueskill().TrueSkill(beta=self.beta, draw_probability=self.draw_probability)
        models = [dict(m) for m in state["models"]]
        current = state["current"]
        if state["format"] == 1:
            for m in models:
                m["lineage"] = None if m["fixed"] else DEFAULT_LINEAGE
            current = {DEFAULT_LINEAGE: current} if current is not None else {}
        self._models = {m["uid"]: ModelEntry(**m) for m in models}
        self._current = dict(current)
        self._games_recorded = state["games_recorded"]
        self._matches = {a: dict(row) for a, row in state["matches"].items()}
        self._results = {a: {b: dict(c) for b, c in row.items()} for a, row in state["results"].items()}

    def save(self, path: str) -> str:
        """Write the state as JSON atomically (temp file, then ``os.replace``)."""
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.state_dict(), f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str, tracker: Any = None) -> ModelRegistry:
        """A registry rebuilt from a file written by :meth:`save`, reporting to ``tracker``."""
        with open(path) as f:
            state = json.load(f)
        registry = cls(tracker=tracker, beta=state["beta"], draw_probability=state["draw_probability"])
        registry.load_state_dict(state)
        return registry
