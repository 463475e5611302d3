"""``TrainEnvSpec`` and ``EvalEnvSpec``: which games to play and how seats are prompted.

Both validate on creation: an env id that cannot be played here, an unknown template or
extraction, or impossible player counts raise a ``ValueError`` that says what to use instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from unstable.games.envs import check_env_id
from unstable.games.extraction import get_action_extraction
from unstable.games.legal_moves import SCRIPTED_POLICIES, check_scripted_opponent
from unstable.games.templates import get_template
from unstable.utils.checks import check_int, check_str

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


@dataclass(frozen=True)
class TrainEnvSpec:
    """A game to collect training data from.

    ``num_actors`` seats are played by the current learner checkpoint (and trained on); the
    other ``num_players - num_actors`` seats get opponents from the model sampler.
    ``num_actors == num_players`` is mirror self-play. ``error_allowance`` is how many invalid
    moves in a row a player may make before losing (0, the seed's choice: the first one loses).
    """

    env_id: str
    num_players: int
    num_actors: int
    prompt_template: str
    action_extraction_fn: str = "default"
    error_allowance: int = 0

    def __post_init__(self) -> None:
        check_int("num_actors", self.num_actors, 1)
        _check_common(self)
        if self.num_actors > self.num_players:
            raise ValueError(
                f"num_actors ({self.num_actors}) cannot exceed num_players ({self.num_players}) for {self.env_id}"
            )


@dataclass(frozen=True)
class EvalEnvSpec:
    """A game to evaluate the current checkpoint on: one seat is the checkpoint, the rest
    ``fixed_opponent`` (a scripted baseline the game has: ``"random"`` = the random-legal-move
    baseline, or ``"heuristic"``, ``"optimal"``, ``"nash"``, see ``SCRIPTED_BASELINES``; an API model name such as
    ``"google/gemini-2.0-flash-lite-001"``; or a checkpoint path). The seed defaulted to Gemini
    over OpenRouter, which needs a key and a network; the offline baseline is our default.
    """

    env_id: str
    num_players: int
    prompt_template: str
    action_extraction_fn: str = "default"
    fixed_opponent: str = DEFAULT_EVAL_OPPONENT
    error_allowance: int = 0

    def __post_init__(self) -> None:
        _check_common(self)
        if not isinstance(self.fixed_opponent, str) or not self.fixed_opponent.strip():
            raise ValueError(f"fixed_opponent must be a non-empty string, got {self.fixed_opponent!r}")
        if self.fixed_opponent in SCRIPTED_POLICIES:
            check_scripted_opponent(self.fixed_opponent, self.env_id)  # raises for unsupported games
