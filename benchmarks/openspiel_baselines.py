"""OpenSpiel's own learners on an OpenSpiel game, for the same number of hands as a run of the library, so an LLM
run's exploitability curve has a baseline beside it (``docs/training.md``, Leduc poker).

Two sampled learners, each fed one hand (episode) at a time, their exploitability read by OpenSpiel
(``exploitability.exploitability``: NashConv / 2 for two players, in chips a hand, the unit of
``unstable eval --exploitability``) every ``--every`` hands:

- ``nfsp``: Neural Fictitious Self-Play (Heinrich & Silver 2016, arXiv 1603.01121) with OpenSpiel's PyTorch agent
  and the settings of its example ``open_spiel/python/examples/nfsp_leduc_pytorch.py`` (one hidden layer of 128,
  anticipatory parameter 0.1, SGD at 0.01 for both networks, exploration 0.06 -> 0.001). Its average policy is
  read, as NFSP reports it. One hand is one episode of both agents.
- ``os-mccfr``: outcome-sampling Monte Carlo CFR (Lanctot et al. 2009), tabular; its average policy is read. One
  OpenSpiel iteration samples one hand for each player as the updating player: two hands.

The tabular learner has a parameter for every information state and the network one input per bit of the
information-state tensor; an LLM seat reads a prompt. Both are what OpenSpiel's examples run; neither is tuned here.

    .venv/bin/python benchmarks/openspiel_baselines.py --game leduc_poker --hands 60000 --every 5000 --seeds 0 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_common_args, machine, write_result

ALGORITHMS = ("nfsp", "os-mccfr")


def _nfsp_curve(game_name: str, hands: int, every: int, seed: int) -> list[dict[str, Any]]:
    """NFSP with the settings of OpenSpiel's Leduc example; the average policy's exploitability every ``every``
    hands."""
    import numpy as np
    import torch
    from open_spiel.python import policy, rl_environment
    from open_spiel.python.algorithms import exploitability
    from open_spiel.python.pytorch import nfsp

    np.random.seed(seed)
    torch.manual_seed(seed)
    env = rl_environment.Environment(game_name, players=2)
    env.seed(seed)
    state_size = env.observation_spec()["info_state"][0]
    num_actions = env.action_spec()["num_actions"]
    agents = [nfsp.NFSP(player, state_representation_size=state_size, num_actions=num_actions,
                        hidden_layers_sizes=[128], reservoir_buffer_capacity=int(2e6), anticipatory_param=0.1,
                        batch_size=128, rl_learning_rate=0.01, sl_learning_rate=0.01, min_buffer_size_to_learn=1000,
                        learn_every=64, optimizer_str="sgd", replay_buffer_capacity=int(2e5),
                        update_target_network_every=19200, epsilon_start=0.06, epsilon_end=0.001,
                        epsilon_decay_duration=int(20e6), loss_str="mse", seed=seed + 10 * player)
              for player in (0, 1)]

    class AveragePolicy(policy.Policy):
        """Both agents' average networks as one OpenSpiel policy (as the example's ``NFSPPolicies``)."""

        def __init__(self) -> None:
            super().__init__(env.game, [0, 1])
            self._obs: dict[str, Any] = {"info_state": [None, None], "legal_actions": [None, None]}

        def action_probabilities(self, state, player_id=None):
            player = state.current_player()
            legal = state.legal_actions(player)
            self._obs["current_player"] = player
            self._obs["info_state"][player] = state.information_state_tensor(player)
            self._obs["legal_actions"][player] = legal
            step = rl_environment.TimeStep(observations=self._obs, rewards=None, discounts=None, step_type=None)
            with agents[player].temp_mode_as(nfsp.MODE.AVERAGE_POLICY):
                probs = agents[player].step(step, is_evaluation=True).probs
            return {action: float(probs[action]) for action in legal}

    reader = AveragePolicy()
    rows, start, seconds_reading = [], time.perf_counter(), 0.0
    for hand in range(1, hands + 1):
        step = env.reset()
        while not step.last():
            player = step.observations["current_player"]
            step = env.step([agents[player].step(step).action])
        for agent in agents:
            agent.step(step)
        if hand % every == 0 or hand == hands:
            t = time.perf_counter()
            value = exploitability.exploitability(env.game, reader)
            seconds_reading += time.perf_counter() - t
            rows.append({"hands": hand, "exploitability": round(float(value), 4),
                         "train s": round(time.perf_counter() - start - seconds_reading, 1)})
    return rows


def _mccfr_curve(game_name: str, hands: int, every: int, seed: int) -> list[dict[str, Any]]:
    """Outcome-sampling MCCFR; the average policy's exploitability every ``every`` hands (two hands an
    iteration)."""
    import numpy as np
    import pyspiel
    from open_spiel.python.algorithms import exploitability, outcome_sampling_mccfr

    np.random.seed(seed)  # the solver samples with numpy's global generator
    game = pyspiel.load_game(game_name)
    solver = outcome_sampling_mccfr.OutcomeSamplingSolver(game)
    rows, start, seconds_reading, played = [], time.perf_counter(), 0.0, 0
    next_reading = every
    while played < hands:
        solver.iteration()
        played += 2
        if played >= next_reading or played >= hands:
            next_reading += every
            t = time.perf_counter()
            value = exploitability.exploitability(game, solver.average_policy())
            seconds_reading += time.perf_counter() - t
            rows.append({"hands": played, "exploitability": round(float(value), 4),
                         "train s": round(time.perf_counter() - start - seconds_reading, 1)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--game", default="leduc_poker", help="an OpenSpiel game name, with parameters")
    parser.add_argument("--hands", type=int, default=60_000, help="hands (episodes) each learner plays")
    parser.add_argument("--every", type=int, default=5_000, help="read the exploitability every this many hands")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--algorithms", nargs="+", choices=ALGORITHMS, default=list(ALGORITHMS))
    add_common_args(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.hands, args.every = min(args.hands, 400), min(args.every, 200)
    if args.hands < 1 or args.every < 1:
        parser.error(f"--hands and --every must be at least 1, got {args.hands} and {args.every}")
    try:
        import pyspiel  # noqa: F401
    except ImportError:
        parser.error("OpenSpiel is not installed: pip install 'unstable-baselines[openspiel]'")
    if "nfsp" in args.algorithms:
        try:
            import tree  # noqa: F401  (dm-tree: OpenSpiel's PyTorch NFSP imports it; its wheel does not require it)
        except ImportError:
            parser.error("OpenSpiel's NFSP needs dm-tree: pip install dm-tree (or --algorithms os-mccfr)")

    info = machine()
    curves = {"nfsp": _nfsp_curve, "os-mccfr": _mccfr_curve}
    rows: list[dict[str, Any]] = []
    for name in args.algorithms:
        for seed in args.seeds:
            for row in curves[name](args.game, args.hands, args.every, seed):
                rows.append({"algorithm": name, "seed": seed, **row})
                print(f"{name} seed {seed}: {row}", flush=True)
    game = args.game.split("(")[0]
    write_result(f"openspiel-baselines-{game}", args, rows,
                 {"game": args.game, "hands": args.hands, "every": args.every, "seeds": args.seeds}, notes=[
                     "OpenSpiel's NFSP (the settings of its Leduc example) and outcome-sampling MCCFR, both read as "
                     "their average policies; exploitability = NashConv / 2, chips a hand; 'train s' leaves the "
                     "readings out."], info=info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
