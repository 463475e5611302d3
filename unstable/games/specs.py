"""``TrainEnvSpec`` and ``EvalEnvSpec``: which games to play and how seats are prompted.

Both validate on creation: an env id that cannot be played here, an unknown template or
extraction, or impossible player counts raise a ``ValueError`` that says what to use instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from unstable.games.envs import check_env_id, first_observation
from unstable.games.extraction import get_action_extraction
from unstable.games.legal_moves import SCRIPTED_POLICIES, check_scripted_opponent
from unstable.games.mixture import EnvironmentMixture
from unstable.games.templates import get_template
from unstable.utils.checks import check_int, check_number, check_str

#: The default scripted opponent (every game with a legal-move reader has it; some have stronger
#: ones, see ``SCRIPTED_BASELINES``); API model names ("provider/model") and checkpoint paths also work.
DEFAULT_EVAL_OPPONENT = "random"


def _check_common(spec) -> None:
    check_int("num_players", spec.num_players, 1)
    check_int("error_allowance", spec.error_allowance, 0)
    check_str("prompt_template", spec.prompt_template, what="a template name (see available_templates())")
    check_str("action_extraction_fn", spec.action_extraction_fn, what="an extraction name such as 'default'")
    get_template(spec.prompt_template)
    get_action_extraction(spec.action_extraction_fn)
    check_env_id(spec.env_id, spec.num_players)
    check_template_fits(spec.prompt_template, spec.env_id, spec.num_players)


def check_template_fits(prompt_template: str, env_id: str, num_players: int = 2) -> None:
    """Render ``prompt_template`` on the first observation of ``env_id``: a template made for one game
    (``qwen3-grid``: TicTacToe's board; ``qwen3-hand``: a Kuhn poker hand) raises ``ValueError`` on another's,
    said here instead of at the run's first game."""
    observation = first_observation(env_id, num_players)
    try:
        get_template(prompt_template)(observation)
    except ValueError as exc:
        raise ValueError(f"prompt_template {prompt_template!r} does not fit {env_id}: {exc}") from None
    except Exception as exc:  # a bug in the template: its own error and traceback, said before any game
        exc.add_note(f"raised by prompt_template {prompt_template!r} on the first observation of {env_id}")
        raise


OPPONENT_SEAT = "opponent"
"""In ``TrainEnvSpec.seats``: a seat the model sampler fills (for the game's first named model)."""


@dataclass(frozen=True)
class TrainEnvSpec:
    """A game to collect training data from.

    ``num_actors`` seats are played by the current learner checkpoint (and trained on); the
    other ``num_players - num_actors`` seats get opponents from the model sampler.
    ``num_actors == num_players`` is mirror self-play. ``error_allowance`` is how many invalid
    moves in a row a player may make before losing (0, the seed's choice: the first one loses).

    ``seats`` says who plays in a run with several trainable models: one entry per seat, each the
    ``name`` of a trainable model (its current checkpoint plays the seat, and the seat's moves
    train that model only) or ``"opponent"`` (the model sampler picks, for the first model named).
    Seats are shuffled game by game, so every model plays every position. For example, with models
    ``alice`` and ``bob``: ``("alice", "alice")`` is alice's mirror self-play, ``("alice", "bob")``
    alice against bob (both learn), ``("bob", "opponent")`` bob against the pool. ``num_actors``
    must count the named seats. ``None`` (the default): ``num_actors`` seats of the run's one model.
    """

    mixture_role: ClassVar[str] = "train"
    env_id: str
    num_players: int
    num_actors: int
    prompt_template: str
    action_extraction_fn: str = "default"
    error_allowance: int = 0
    seats: tuple[str, ...] | None = None
    weight: float = 1.0
    """Its share of the train games, relative to the other train envs' weights."""

    def __post_init__(self) -> None:
        check_int("num_actors", self.num_actors, 1)
        check_number("weight", self.weight, 0, low_open=True)
        _check_common(self)
        if self.num_actors > self.num_players:
            raise ValueError(
                f"num_actors ({self.num_actors}) cannot exceed num_players ({self.num_players}) for {self.env_id}"
            )
        if self.seats is None:
            return
        if isinstance(self.seats, list):
            object.__setattr__(self, "seats", tuple(self.seats))
        if not isinstance(self.seats, tuple) or not all(isinstance(s, str) and s for s in self.seats):
            raise ValueError(f"seats must be a list of model names or {OPPONENT_SEAT!r}, one per seat, "
                             f"got {self.seats!r}")
        if len(self.seats) != self.num_players:
            raise ValueError(f"seats names {len(self.seats)} seats but {self.env_id} has num_players="
                             f"{self.num_players}: {list(self.seats)}")
        named = [s for s in self.seats if s != OPPONENT_SEAT]
        if not named:
            raise ValueError(f"seats {list(self.seats)} names no trainable model: a train game needs one")
        if len(named) != self.num_actors:
            raise ValueError(f"num_actors ({self.num_actors}) must count the seats played by trainable models "
                             f"in seats {list(self.seats)} ({len(named)})")

    @property
    def models(self) -> tuple[str, ...]:
        """The trainable models that play (and learn) in this spec's games, in seat order, once each."""
        return tuple(dict.fromkeys(s for s in self.seats or () if s != OPPONENT_SEAT))

    def __add__(self, other: object) -> EnvironmentMixture:
        return EnvironmentMixture.of(self, other)

    def __radd__(self, other: object) -> EnvironmentMixture:
        return EnvironmentMixture.of(self) if other == 0 else EnvironmentMixture.of(other, self)


@dataclass(frozen=True)
class EvalEnvSpec:
    """A game to evaluate the current checkpoint on: one seat is the checkpoint, the rest
    ``fixed_opponent`` (a scripted baseline the game has: ``"random"`` = the random-legal-move
    baseline, or ``"heuristic"``, ``"optimal"``, ``"nash"``, see ``SCRIPTED_BASELINES``; an API model name such as
    ``"google/gemini-2.0-flash-lite-001"``; or a checkpoint path). The seed defaulted to Gemini
    over OpenRouter, which needs a key and a network; the offline baseline is our default
    (``None`` means it). A single-player game (``num_players=1``) has no opponent: the checkpoint
    plays alone, and its success rate (reward above 0) and mean reward are reported.
    """

    mixture_role: ClassVar[str] = "eval"
    env_id: str
    num_players: int
    prompt_template: str
    action_extraction_fn: str = "default"
    fixed_opponent: str | None = None
    error_allowance: int = 0
    model: str | None = None
    """The trainable model evaluated (its current checkpoint); ``None``: each of the run's models in turn."""

    def __post_init__(self) -> None:
        _check_common(self)
        check_str("model", self.model, allow_none=True, what="the name of one of the run's trainable models")
        if self.num_players == 1:
            if self.fixed_opponent is not None:
                raise ValueError(f"{self.env_id} is played with num_players=1: a single-player game has no "
                                 f"opponent, so leave fixed_opponent out (got {self.fixed_opponent!r})")
            return
        if self.fixed_opponent is None:
            object.__setattr__(self, "fixed_opponent", DEFAULT_EVAL_OPPONENT)
        if not isinstance(self.fixed_opponent, str) or not self.fixed_opponent.strip():
            raise ValueError(f"fixed_opponent must be a non-empty string, got {self.fixed_opponent!r}")
        if self.fixed_opponent in SCRIPTED_POLICIES:
            check_scripted_opponent(self.fixed_opponent, self.env_id)  # raises for unsupported games

    def __add__(self, other: object) -> EnvironmentMixture:
        return EnvironmentMixture.of(self, other)

    def __radd__(self, other: object) -> EnvironmentMixture:
        return EnvironmentMixture.of(self) if other == 0 else EnvironmentMixture.of(other, self)
