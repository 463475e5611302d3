"""Environments beyond TextArena games: single-turn, collaborative and parallel episodes, composition,
single-player games, and a real run that trains on them (Ray, the tiny model)."""

from __future__ import annotations

import asyncio
import os
from collections import Counter

import pytest

from tests.conftest import TTT, small_run_kwargs
from unstable.environments import (
    CollaborativeEnvironment,
    EnvironmentMixture,
    ParallelEnvironment,
    Participant,
    SingleTurnEnvironment,
    arithmetic_dataset,
    exact_match,
    reward_function,
)
from unstable.games.specs import EvalEnvSpec, TrainEnvSpec
from unstable.policies.base import PolicyOutput
from unstable.records import AgentSpec, GameSpec, PolicyRef


@reward_function(name="correct")
def correct(completion: str, answer: str) -> float:
    return exact_match(completion, answer)


@reward_function(name="short", weight=0.1)
def short(completion: str) -> float:
    return 1.0 / (1 + len(completion))


class Scripted:
    """Answers from a function of the observation; records what it was shown."""

    def __init__(self, answer, uid="s"):
        self.answer, self.ref, self.seen = answer, PolicyRef(uid, kind="checkpoint"), []

    async def act(self, ctx):
        self.seen.append(ctx.observation)
        text = self.answer(ctx.observation)
        return PolicyOutput(action=text, completion_text=text, prompt=ctx.observation)


def solve(observation: str) -> str:
    """The right answer to the last 'What is a + b?' in the observation."""
    question = observation[observation.rindex("What is"):]
    a, b = question.removeprefix("What is ").split("?")[0].split(" + ")
    return f"\\boxed{{{int(a) + int(b)}}}"


def spec_for(env, seats, item=0, split="train", game_id=0):
    return GameSpec(game_id, env.env_id, 7, tuple(AgentSpec(i, PolicyRef("s")) for i in range(seats)),
                    environment=env.name, item=item, split=split)


def play(env, spec, policies):
    return asyncio.run(env.play(spec, policies))


DATA = arithmetic_dataset(20, seed=3)


# ----------------------------------------------------------------------------- single turn
def test_single_turn_asks_num_samples_answers_and_weights_the_reward_functions():
    env = SingleTurnEnvironment("add", reward_functions=[correct, short], train_data=DATA, prompt_column="question",
                                num_samples=3)
    row = DATA[4]
    answers = [solve(row["question"]), "\\boxed{-1}", "no box"]
    policies = {i: Scripted(lambda obs, a=a: a) for i, a in enumerate(answers)}
    record = play(env, spec_for(env, 3, item=4), policies)
    assert [t.player_id for t in record.turns] == [0, 1, 2]
    assert record.turns[0].observation == row["question"]
    good = solve(row["question"])
    assert record.final_rewards[0] == pytest.approx(1.0 + 0.1 / (1 + len(good)))
    assert record.final_rewards[0] == 1.0 * 1.0 + 0.1 * (1.0 / (1 + len(good)))  # the weighted sum, exactly
    assert record.final_rewards[1] == pytest.approx(0.1 / (1 + len("\\boxed{-1}")))
    assert record.game_info[2]["reward_components"] == {"correct": 0.0, "short": pytest.approx(1 / 7)}


def test_a_missing_dataset_field_fails_when_the_environment_is_made():
    @reward_function(name="judge")
    def judge(completion: str, solution: str) -> float:
        return 0.0

    with pytest.raises(ValueError, match=r"reward function 'judge' needs the field 'solution', which environment "
                                         r"'add'.*does not have; its fields are: question, answer, a, b, level"):
        SingleTurnEnvironment("add", reward_functions=[judge], train_data=DATA, prompt_column="question")
    with pytest.raises(ValueError, match="prompt column 'qestion' is not a column"):
        SingleTurnEnvironment("add", reward_functions=[correct], train_data=DATA, prompt_column="qestion")


def test_prompt_format_over_columns_and_system_prompt():
    env = SingleTurnEnvironment("add", reward_functions=[correct], train_data=DATA, prompt_format="{a} plus {b}",
                                system_prompt="Be brief.")
    seen = Scripted(lambda obs: "x")
    play(env, spec_for(env, 1, item=2), {0: seen})
    assert seen.seen == [f"Be brief.\n\n{DATA[2]['a']} plus {DATA[2]['b']}"]


def test_train_items_cover_every_row_once_per_epoch_and_eval_sets_are_named():
    env = SingleTurnEnvironment("add", reward_functions=[correct], train_data=DATA, prompt_column="question",
                                eval_data={"test": arithmetic_dataset(5, split="test")})
    assert sorted(env.train_item(k) for k in range(20)) == list(range(20))
    assert sorted(env.train_item(k) for k in range(20, 40)) == list(range(20))
    assert [env.train_item(k) for k in range(20)] != [env.train_item(k) for k in range(20, 40)]  # reshuffled
    assert [(e.env_id, e.size) for e in env.eval_entries()] == [("add-test", 5)]
    only_eval = SingleTurnEnvironment("aime", reward_functions=[correct], eval_data=DATA, prompt_column="question")
    assert not only_eval.is_train and only_eval.eval_sizes() == {"eval": 20}


# ----------------------------------------------------------------------------- collaborative
def test_collaborative_turns_follow_the_round_spec_and_each_participant_is_scored_on_its_own_message():
    env = CollaborativeEnvironment(
        "duo", participants=[Participant("Bob", system_prompt="You are Bob."), Participant("Alice")],
        round_spec="Bob -> Alice -> Bob", reward_functions=[correct], train_data=DATA, prompt_column="question")
    bob = Scripted(lambda obs: "\\boxed{0}")
    alice = Scripted(solve)
    record = play(env, spec_for(env, 2, item=1), {0: bob, 1: alice})
    assert [t.player_id for t in record.turns] == [0, 1, 0]
    assert bob.seen[0].startswith("You are Bob.\n\nTask: What is") and "(nothing yet)" in bob.seen[0]
    assert "Bob: \\boxed{0}\nAlice: \\boxed{" in bob.seen[1] and bob.seen[1].endswith("It is your turn, Bob.")
    expected_bob = float(DATA[1]["a"] + DATA[1]["b"] == 0)
    assert record.final_rewards == {0: expected_bob, 1: 1.0}


def test_collaborative_shared_reward_and_conversation_functions():
    from unstable.environments import conversation_reward_function

    @conversation_reward_function(name="spoke")
    def spoke(conversation, actor_name) -> float:
        return float(sum(m["name"] == actor_name for m in conversation))

    env = CollaborativeEnvironment("duo", participants=["Bob", "Alice"], round_spec="Bob -> Alice",
                                   reward_functions=[correct, spoke], shared_reward=True, train_data=DATA,
                                   prompt_column="question")
    record = play(env, spec_for(env, 2, item=1), {0: Scripted(lambda o: "?"), 1: Scripted(solve)})
    assert record.final_rewards == {0: 2.0, 1: 2.0}  # Alice's final answer is right, and Alice spoke once


def test_round_spec_errors_name_the_actor_at_build_time():
    with pytest.raises(ValueError, match=r"unknown actor 'Alcie' at position 7 \(did you mean 'Alice'\?\)"):
        CollaborativeEnvironment("duo", participants=["Bob", "Alice"], round_spec="Bob -> Alcie",
                                 reward_functions=[correct], train_data=DATA, prompt_column="question")


# ----------------------------------------------------------------------------- parallel
def test_parallel_participants_answer_alone_and_a_combiner_merges():
    def majority(prompt, answers):
        return Counter(answers).most_common(1)[0][0]

    env = ParallelEnvironment("vote", participants=3, combiner=majority, reward_functions=[correct], train_data=DATA,
                              prompt_column="question")
    row = DATA[0]
    good = solve(row["question"])
    answers = [good, good, "\\boxed{99}"]
    record = play(env, spec_for(env, 3), {i: Scripted(lambda o, a=a: a) for i, a in enumerate(answers)})
    assert record.final_rewards == {0: 1.0, 1: 1.0, 2: 0.0}
    assert record.game_info[2]["combined_components"] == {"correct": 1.0}
    team = ParallelEnvironment("team", participants=3, combiner=majority, reward_functions=[correct], train_data=DATA,
                               prompt_column="question", participant_reward="combined")
    record = play(team, spec_for(team, 3), {i: Scripted(lambda o, a=a: a) for i, a in enumerate(answers)})
    assert record.final_rewards == {0: 1.0, 1: 1.0, 2: 1.0}


def test_parallel_with_a_model_combiner_shows_it_the_answers():
    env = ParallelEnvironment("judge", participants=["A", "B"], combiner=Participant("C"), reward_functions=[correct],
                              train_data=DATA, prompt_column="question")
    combiner = Scripted(lambda obs: obs.split("1. ")[1].split("\n")[0])  # picks the first answer
    record = play(env, spec_for(env, 3), {0: Scripted(solve), 1: Scripted(lambda o: "x"), 2: combiner})
    assert "Answers:\n1. \\boxed{" in combiner.seen[0] and "2. x" in combiner.seen[0]
    assert record.final_rewards == {0: 1.0, 1: 0.0, 2: 1.0}


# ----------------------------------------------------------------------------- composition
def test_composition_keeps_weights_eval_sets_and_textarena_specs():
    train = SingleTurnEnvironment("add", reward_functions=[correct], train_data=DATA, prompt_column="question",
                                  eval_data={"test": DATA}, weight=3.0)
    aime = SingleTurnEnvironment("aime", reward_functions=[correct], eval_data={"hard": DATA},
                                 prompt_column="question")
    game = TrainEnvSpec(num_actors=2, **TTT)
    mix = train + game + aime + EvalEnvSpec(**TTT)
    assert isinstance(mix, EnvironmentMixture) and len(mix.parts) == 4
    assert mix.shares() == [("add", 0.75), ("TicTacToe-v0-train", 0.25)]  # aime is eval-only
    assert [p.env_id for p in mix.eval_parts()] == ["add-test", "aime-hard", "TicTacToe-v0-train"]
    assert sum([train, game]).parts == (train, game)
    with pytest.raises(ValueError, match=r"named \['add'\] twice"):
        _ = train + train
    with pytest.raises(TypeError, match="add up to a mixture"):
        _ = train + "TicTacToe"


def test_weighted_env_sampling_follows_the_weights():
    from unstable.samplers.env_samplers import UniformRandomEnvSampler

    a = TrainEnvSpec(num_actors=2, weight=3.0, **TTT)
    b = TrainEnvSpec(num_actors=2, weight=1.0, **{**TTT, "env_id": "KuhnPoker-v0-train"})
    sampler = UniformRandomEnvSampler([a, b], rng_seed=0)
    picks = Counter(sampler.sample("train").env_id for _ in range(4000))
    assert 0.72 < picks["TicTacToe-v0-train"] / 4000 < 0.78


# ----------------------------------------------------------------------------- single-player games
def test_single_player_eval_specs_need_no_opponent():
    spec = EvalEnvSpec("GuessTheNumber-v0-train", 1, "qwen3-sp")
    assert spec.fixed_opponent is None
    with pytest.raises(ValueError, match="a single-player game has no opponent"):
        EvalEnvSpec("GuessTheNumber-v0-train", 1, "qwen3-sp", fixed_opponent="random")
    assert EvalEnvSpec(**TTT).fixed_opponent == "random"  # two players: the default baseline, as before


def test_single_player_games_report_success_rate_and_reward():
    from unstable.records import GameRecord
    from unstable.tracking.game_metrics import game_samples

    ref = PolicyRef("ckpt-1", version=1)
    spec = GameSpec(0, "GuessTheNumber-v0-train", 1, (AgentSpec(0, ref),), is_eval=True, eval_player_id=0)
    won = game_samples(GameRecord(spec, (), {0: 1.0}, {0: {}}))
    lost = game_samples(GameRecord(spec, (), {0: -1.0}, {0: {}}))
    assert won["eval/GuessTheNumber-v0-train/none/success_rate"] == [1.0]
    assert lost["eval/GuessTheNumber-v0-train/none/success_rate"] == [0.0]
    assert lost["eval/GuessTheNumber-v0-train/none/reward"] == [-1.0]


# ----------------------------------------------------------------------------- build() and a real run
def test_bad_environment_definitions_fail_before_ray(no_ray, tiny_model_dir, tmp_path):
    import unstable

    env = SingleTurnEnvironment("add", reward_functions=[correct], train_data=DATA, prompt_column="question")
    other = SingleTurnEnvironment("add", reward_functions=[correct], eval_data=DATA, prompt_column="question")
    kwargs = small_run_kwargs(tiny_model_dir, tmp_path, train_envs=[env], eval_envs=[other])
    with pytest.raises(ValueError, match="two environments are named 'add'"):
        unstable.build(**kwargs)
    duo = CollaborativeEnvironment("duo", participants=[Participant("Bob", model="bob"), "Alice"],
                                   round_spec="Bob -> Alice", reward_functions=[correct], train_data=DATA,
                                   prompt_column="question")
    with pytest.raises(ValueError, match=r"participants name the models \['bob'\], which the run does not declare"):
        unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, train_envs=[duo], eval_envs=None))


@pytest.mark.slow
def test_a_run_trains_on_a_single_turn_environment_next_to_a_game(ray_session, tiny_model_dir, tmp_path):
    """GRPO-style groups: each episode's answers reach the learner together; the game and the
    environment share the learner; eval sets are played and logged with reward components."""
    import unstable
    from unstable.tracking import read_metrics

    env = SingleTurnEnvironment("add", reward_functions=[correct, short], train_data=arithmetic_dataset(50),
                                eval_data={"test": arithmetic_dataset(10, split="test")}, prompt_column="question",
                                num_samples=4, weight=3.0)
    kwargs = small_run_kwargs(tiny_model_dir, tmp_path, train_envs=env + TrainEnvSpec(num_actors=2, **TTT),
                              whole_games=True)
    run = unstable.build(**kwargs)
    try:
        summary = run.start(learning_steps=2, num_collection_workers=4, num_eval_workers=2)
        received = ray_session.get(run.actors.buffer.stats.remote())
    finally:
        run.stop()
    assert summary["collector"]["trajectories_sent"] == received["trajectories_received"] > 0
    metrics = read_metrics(run.run_dir)
    keys = set().union(*(m.keys() for m in metrics))
    assert {"collect/add/reward/correct", "collect/add/reward/short", "eval/add-test/none/success_rate",
            "eval/add-test/none/reward/correct"} <= keys
    assert os.path.isfile(os.path.join(run.run_dir, "checkpoints", "ckpt-2", "adapter_config.json"))


def test_evaluate_environment_plays_every_row_of_the_eval_set(tiny_model_dir):
    from unstable.eval.environments import evaluate_environment

    env = SingleTurnEnvironment("add", reward_functions=[correct, short], prompt_column="question",
                                eval_data={"test": arithmetic_dataset(6, split="test")})
    with pytest.raises(ValueError, match=r"has no eval set 'dev'; its eval sets: \['test'\]"):
        evaluate_environment(tiny_model_dir, env, "dev")
    with pytest.raises(ValueError, match=r"success='right' is not one of 'add''s reward functions"):
        evaluate_environment(tiny_model_dir, env, "test", success="right")
    result = evaluate_environment(tiny_model_dir, env, "test", success="correct")
    assert result.episodes == 6 and result.failed == 0 and 1 <= result.distinct_answers <= 6
    assert result.success_rate == 0.0 and result.success_ci95[0] == 0.0  # random weights never add up
    assert result.components["correct"] == 0.0 and 0 < result.components["short"] <= 1
    assert result.mean_reward == pytest.approx(0.1 * result.components["short"])


def test_names_that_become_metric_keys_are_checked():
    with pytest.raises(ValueError, match=r"an environment name must be a non-empty string of letters.*got 'a/b'"):
        SingleTurnEnvironment("a/b", reward_functions=[correct], train_data=DATA, prompt_column="question")
    with pytest.raises(ValueError, match=r"environment 'add': an eval set name must be .*got 'my set'"):
        SingleTurnEnvironment("add", reward_functions=[correct], eval_data={"my set": DATA}, prompt_column="question")


# ----------------------------------------------------------------------------- writing your own
def docs_parity_class():
    """The ``Parity`` subclass of docs/environments.md's "Writing your own", defined from the page's block
    (the page runs whole, with the tiny model, in test_docs.py)."""
    from pathlib import Path

    from doc_examples import code_blocks

    page = Path(__file__).resolve().parents[1] / "docs" / "environments.md"
    (block,) = [b for b in code_blocks("python", [page]) if "class Parity(TaskEnvironment)" in b]
    namespace = {"__name__": "docs_environments"}
    exec(compile(block.split("\nparity = Parity()")[0], str(page), "exec"), namespace)  # the class, not its eval
    return namespace["Parity"]


def test_the_documented_subclass_scores_itself_with_the_documented_helpers():
    """TaskEnvironment is importable from unstable.environments, takes no reward function when the
    subclass scores itself, and row / ask / record / RewardScores do what the page says."""
    parity = docs_parity_class()()
    assert parity.reward_functions == [] and parity.train_size() == 200 and parity.eval_sizes() == {"test": 8}
    for answer, reward in (("odd", 1.0), ("Even ", 0.0)):  # a scripted policy gives its action as it is
        record = play(parity, spec_for(parity, 1, item=3, split="test"), {0: Scripted(lambda _, a=answer: a)})
        assert record.final_rewards == {0: reward}
        assert record.game_info[0]["reward_components"] == {"correct": reward}
        assert record.turns[0].observation == "Is 3 even or odd? Answer in \\boxed{}."


def test_the_built_in_environments_still_need_reward_functions():
    from unstable.environments import TaskEnvironment

    kwargs = {"train_data": DATA, "prompt_column": "question"}
    for make in (lambda: SingleTurnEnvironment("a", reward_functions=[], **kwargs),
                 lambda: CollaborativeEnvironment("b", participants=["A", "B"], round_spec="A -> B",
                                                  reward_functions=[], **kwargs),
                 lambda: ParallelEnvironment("c", participants=2, combiner=lambda p, a: a[0], reward_functions=[],
                                             **kwargs)):
        with pytest.raises(ValueError, match="needs at least one reward function"):
            make()
    own = TaskEnvironment("d", participants=[Participant("solver")], reward_functions=[correct], **kwargs)
    assert [f.name for f in own.reward_functions] == ["correct"]  # given, they are checked and kept


def test_only_the_collaborative_environment_takes_conversation_reward_functions():
    """What the page says: a single-turn or parallel environment refuses @conversation_reward_function."""
    from unstable.environments import conversation_reward_function

    @conversation_reward_function(name="turns")
    def turns(conversation, actor_name) -> float:
        return float(len(conversation))

    kwargs = {"reward_functions": [turns], "train_data": DATA, "prompt_column": "question"}
    assert CollaborativeEnvironment("b", participants=["A", "B"], round_spec="A -> B", **kwargs).reward_functions
    for make in (lambda: SingleTurnEnvironment("a", **kwargs),
                 lambda: ParallelEnvironment("c", participants=2, combiner=lambda p, a: a[0], **kwargs)):
        with pytest.raises(ValueError, match=r"'turns' is a conversation reward function, but .* takes only"):
            make()
