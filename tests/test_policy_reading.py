"""Reading an LLM seat's policy: real game states, exact teacher-forced move probabilities that match the
backend's samples, and exploitability from them. The tests that read a model are marked slow: the
fine-tuned fixture model (conftest.py's ``answering_model``) takes ~30 s to make on a quiet 2-core
machine (minutes on a busy one)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from unstable.eval.exploitability import NoSolverError, evaluate_exploitability
from unstable.eval.game_states import (
    board_string,
    canonical_history,
    kuhn_states,
    replay,
    reversed_history,
    tictactoe_states,
)
from unstable.eval.policy_reading import PolicyReader
from unstable.eval.solvers import INFO_SETS, reachable_boards, to_move
from unstable.games.templates import render_prompt
from unstable.inference.base import SamplingParams

ENV = "TicTacToe-v0-train"
STATE = "O   X    "  # two moves in: seven legal cells


@pytest.fixture(scope="module")
def ttt_states():
    return tictactoe_states(ENV)


def test_states_are_every_board_in_play_replayed_in_a_real_env(ttt_states):
    assert set(ttt_states) == set(reachable_boards()) and len(ttt_states) == 4520  # the solver's boards
    for board, state in ttt_states.items():  # each history really reaches its board, with that seat to move
        player, _, env = replay(ENV, state.history)
        assert board_string(env) == board and player == state.player == (0 if to_move(board) == "O" else 1)
    state = ttt_states[STATE]
    assert state.history == ("[0]", "[4]") and state.player == 0
    assert state.moves == tuple(f"[{c}]" for c in (1, 2, 3, 5, 6, 7, 8))
    assert "Current Board:" in state.observation and "Available Moves:" in state.observation
    # two move orders give the same board: the board template sees the same prompt, the full one does not
    board = "OX O X   "
    first, other = canonical_history(board, "O"), reversed_history(board, "O")
    assert first != other
    obs = [replay(ENV, h)[1] for h in (first, other)]
    assert render_prompt("qwen3-board", obs[0]) == render_prompt("qwen3-board", obs[1])
    assert render_prompt("qwen3-zs", obs[0]) != render_prompt("qwen3-zs", obs[1])


def test_kuhn_states_are_the_twelve_round_one_information_sets():
    states = kuhn_states("KuhnPoker-v0-train")
    keys = {f"{card}:{','.join(history)}" for card, history in states}
    assert keys == set(INFO_SETS)
    facing = states[("Q", ("check", "bet"))]
    assert facing.player == 1 and facing.moves == ("[fold]", "[call]")
    assert "Your card is: 'Q'" in facing.observation


def test_an_invalid_move_loses_the_game_under_the_eval_rules():
    """The rule the solvers apply to the "other" mass: error_allowance=0 (every spec's default) loses at once."""
    player, _, env = replay(ENV, ("[0]", "[4]"))
    done, _ = env.step("[INVALID_ACTION]")
    rewards, _ = env.close()
    assert done and rewards == {player: -1, 1 - player: 1}


def _independent_logprob(backend, prompt: str, answer: list[int], temperature: float) -> float:
    """One unpadded full-sequence pass per stop token, with the learners' log-prob maths."""
    from unstable.algorithms.policy_gradient import token_logprobs

    ids = backend.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    total = []
    for eos in sorted(backend.eos_ids):
        seq = torch.tensor([ids + answer + [eos]])
        with torch.no_grad():
            logits = backend.model(input_ids=seq).logits
        total.append(float(token_logprobs(logits, seq, temperature)[0, len(ids) - 1:].sum()))
    return float(torch.logsumexp(torch.tensor(total), 0))


@pytest.mark.slow
def test_exact_reading_equals_one_sequence_at_a_time_scoring(answering_model, ttt_states):
    """Batched prompts of different lengths, a shared prompt cache and the stop tokens: the same numbers
    as scoring each full completion alone with the learners' token_logprobs."""
    from unstable.inference.transformers_backend import TransformersBackend

    backend = TransformersBackend(answering_model)
    try:
        reader = PolicyReader(backend, None, SamplingParams(temperature=0.7, top_p=1.0, max_new_tokens=16))
        boards = [" " * 9, STATE, "OX O X   ", STATE, " " * 9]
        prompts = [render_prompt("qwen3-board", ttt_states[b].observation) for b in boards]
        # in one batch: states with every legal move, a lone candidate, and answers of 4 and 8 tokens
        moves = [ttt_states[b].moves for b in boards[:3]] + [["[4]"], ["[4]", "[3 1 2]", "[8]"]]
        assert [len(reader.answer_ids(m)) for m in moves[4]] == [4, 8, 4]
        dists = reader.read_exact(prompts, moves)
        for prompt, legal, dist in zip(prompts, moves, dists, strict=True):
            for move in legal[:3]:
                expected = _independent_logprob(backend, prompt, reader.answer_ids(move), 0.7)
                assert math.log(dist.probs[move]) == pytest.approx(expected, abs=1e-4)
            assert dist.other == pytest.approx(1 - sum(dist.probs.values()))
        greedy = PolicyReader(backend, None, SamplingParams(temperature=0, max_new_tokens=16))
        (g,) = greedy.read_exact(prompts[1:2], [ttt_states[STATE].moves])
        assert set(g.probs.values()) <= {0.0, 1.0} and sum(g.probs.values()) in (0.0, 1.0)
    finally:
        backend.close()


@pytest.mark.slow
def test_exact_distribution_matches_2000_samples_of_the_backend(answering_model, ttt_states):
    """The required check: the exact reading of a real TicTacToe state against the frequencies of 2,000
    completions sampled at the same temperature through the real backend (chi-square over the legal
    moves' canonical completions and everything else)."""
    from scipy.stats import chisquare

    from unstable.inference.transformers_backend import TransformersBackend

    backend = TransformersBackend(answering_model, max_batch_size=250, batch_wait_ms=0)
    try:
        reader = PolicyReader(backend, None, SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=16))
        state = ttt_states[STATE]
        prompt = render_prompt("qwen3-board", state.observation)
        (exact,) = reader.read_exact([prompt], [state.moves])
        assert max(exact.probs.values()) < 0.5 and sum(p > 0.03 for p in exact.probs.values()) >= 4  # not degenerate
        sampled = reader.read_sampled(prompt, state.moves, 2000)
    finally:
        backend.close()
    observed = [round(sampled.canonical[m] * 2000) for m in state.moves]
    observed.append(2000 - sum(observed))
    expected = [exact.probs[m] * 2000 for m in state.moves] + [exact.other * 2000]
    assert min(expected) > 5  # chi-square's validity condition
    assert chisquare(observed, expected).pvalue > 1e-3
    for move in state.moves:  # and per move: the exact probability inside the samples' 95% interval, widened
        lo, hi = sampled.intervals[move]
        assert lo - 0.02 <= exact.probs[move] <= hi + 0.02


def test_exploitability_refuses_games_without_a_solver_and_history_dependent_prompts():
    with pytest.raises(NoSolverError, match="TicTacToe, KuhnPoker"):
        evaluate_exploitability("tiny", "ConnectFour-v0-train")
    with pytest.raises(ValueError, match="move history"):
        evaluate_exploitability("tiny", ENV, prompt_template="qwen3-zs", method="exact")


@pytest.mark.slow
def test_kuhn_exploitability_of_a_tiny_model_exact_and_sampled(answering_model):
    from unstable.inference.transformers_backend import TransformersBackend

    backend = TransformersBackend(answering_model, batch_wait_ms=0)
    try:
        exact = evaluate_exploitability(answering_model, "KuhnPoker-v0-train", backend=backend)
        sampled = evaluate_exploitability(answering_model, "KuhnPoker-v0-train", backend=backend, method="sampled",
                                          samples=8, max_new_tokens=8)
    finally:
        backend.close()
    assert exact.method == "exact" and exact.states == 12 and sampled.method == "sampled" and sampled.samples == 8
    assert exact.interval is None and sampled.interval[0] <= sampled.exploitability <= sampled.interval[1] + 1e-12
    for result in (exact, sampled):
        assert 0 <= result.other_mean <= result.other_max <= 1
        assert result.exploitability == result.solver["exploitability"]
        json.dumps(result.to_dict(with_policy=True))
    assert set(exact.policy) == set(INFO_SETS)


@pytest.mark.slow
def test_an_adapter_is_read_with_its_weights(tiny_model_dir, adapters, ttt_states):
    """Log-probabilities (the untrained model's are tiny, but exact) of a LoRA seat: the backend's adapter
    rows equal the adapter merged into the weights, and differ from the base seat's."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from unstable.algorithms.policy_gradient import token_logprobs
    from unstable.eval.policy_reading import _Item
    from unstable.inference.transformers_backend import TransformersBackend

    backend = TransformersBackend(tiny_model_dir)
    try:
        sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=16)
        base, lora = (PolicyReader(backend, adapter, sampling) for adapter in (None, adapters[0]))
        prompt = render_prompt("qwen3-board", ttt_states[STATE].observation)
        ids = backend.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answers = [lora.answer_ids(m) for m in ("[1]", "[8]")]
        (read,) = lora._score([_Item(ids, answers, 16)])
        (read_base,) = base._score([_Item(ids, answers, 16)])
    finally:
        backend.close()
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), adapters[0])
    merged = merged.merge_and_unload().eval()
    for answer, value, value_base in zip(answers, read, read_base, strict=True):
        totals = []
        for eos in sorted(backend.eos_ids):
            seq = torch.tensor([ids + answer + [eos]])
            with torch.no_grad():
                totals.append(token_logprobs(merged(input_ids=seq).logits, seq)[0, len(ids) - 1:].sum())
        assert value == pytest.approx(float(torch.logsumexp(torch.stack(totals), 0)), abs=1e-3)
        assert abs(value - value_base) > 1e-2


@pytest.mark.slow
def test_the_cli_prints_and_writes_the_exploitability(answering_model, tmp_path, capsys):
    from unstable.cli.commands import main

    out = tmp_path / "exploit.json"
    assert main(["eval", "--exploitability", "--model", answering_model, "--env", "KuhnPoker-v0-train",
                 "--temperature", "1", "--top-p", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "exploitability" in printed and "12 states read (exact)" in printed
    saved = json.loads(out.read_text())
    assert saved["env_id"] == "KuhnPoker-v0-train" and set(saved["policy"]) == set(INFO_SETS)
    assert main(["eval", "--exploitability", "--model", "tiny", "--env", "ConnectFour-v0-train"]) == 2
    assert "no exploitability solver" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize(("temperature", "top_p"), [(0.7, 0.9), (1.3, 0.8)])
def test_under_top_p_the_reading_equals_the_backends_own_log_probs(answering_model, ttt_states, temperature, top_p):
    """Each canonical completion the backend samples records its tokens' log-probs under the temperature and
    the nucleus; the reading of the same answer tokens (a token limit that ends generation right after
    them, so no stop token is scored) gives the same sum."""
    from unstable.eval.policy_reading import _Item
    from unstable.inference.base import GenerationRequest
    from unstable.inference.transformers_backend import TransformersBackend

    backend = TransformersBackend(answering_model, batch_wait_ms=0)
    try:
        sampling = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=16)
        reader = PolicyReader(backend, None, sampling)
        state = ttt_states[STATE]
        prompt = render_prompt("qwen3-board", state.observation)
        ids = backend.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        checked = 0
        for result in backend.generate_batch([GenerationRequest(prompt, None, sampling)] * 32):
            move = reader.extract(result.sample.text).action
            if move in state.moves and reader._is_canonical(result.sample, move):
                answer = reader.answer_ids(move)
                (read,) = reader._score([_Item(ids, [answer], len(answer))])
                assert read[0] == pytest.approx(sum(result.sample.completion_logprobs[:-1]), abs=1e-4)
                checked += 1
    finally:
        backend.close()
    assert checked >= 10


@pytest.mark.slow
def test_all_checkpoints_of_a_run_are_read_and_appended(answering_model, tmp_path, capsys):
    """A run directory as build() leaves it (config, registry with the base and a LoRA checkpoint): one line
    per checkpoint in exploitability.jsonl, oldest first, at its iteration."""
    from conftest import make_adapter

    from unstable.cli.commands import main

    make_adapter(answering_model, tmp_path / "checkpoints" / "ckpt-3", seed=1)
    (tmp_path / "config.json").write_text(json.dumps({"models": [{"name": "model", "model_name": answering_model}],
                                                      "train_envs": [{"prompt_template": "qwen3-board"}]}))
    (tmp_path / "registry").mkdir()
    models = [{"uid": "ckpt-3", "iteration": 3, "path_or_name": "checkpoints/ckpt-3", "lineage": "model",
               "fixed": False},
              {"uid": "random", "fixed": True, "path_or_name": "random", "iteration": None},
              {"uid": "base", "iteration": 0, "path_or_name": None, "lineage": "model", "fixed": False}]
    (tmp_path / "registry" / "registry.json").write_text(json.dumps({"models": models}))
    assert main(["eval", "--exploitability", "--run", str(tmp_path), "--all-checkpoints", "--env",
                 "KuhnPoker-v0-train", "--temperature", "1", "--top-p", "1", "--out", str(tmp_path / "avg.json")]) == 0
    lines = [json.loads(x) for x in (tmp_path / "exploitability.jsonl").read_text().splitlines()]
    assert [(x["uid"], x["learner_step"]) for x in lines] == [("base", 0), ("ckpt-3", 3)]
    key = "eval/KuhnPoker-v0-train/exploitability"
    assert all(0 <= x[f"{key}_other_mass"] <= 1 and key in x for x in lines)
    assert lines[0][key] != lines[1][key]  # the adapter changed the policy
    # the tables conditioned on a legal answer: each line's own, and their average beside the plain one
    assert all(0 <= x[f"{key}_legal"] <= x[key] + 1e-9 for x in lines)  # `other` counted as a fold costs chips
    assert lines[0][f"{key}_average_legal"] == pytest.approx(lines[0][f"{key}_legal"], abs=1e-12)
    # The average of the checkpoints so far: of one, the checkpoint itself; of two, the table in --out.
    assert lines[0][f"{key}_average"] == pytest.approx(lines[0][key], abs=1e-12)
    average = json.loads((tmp_path / "avg.json").read_text())
    assert average["checkpoints"] == 2 and average["exploitability"] == lines[1][f"{key}_average"]
    assert average["legal_exploitability"] == lines[1][f"{key}_average_legal"]
    assert len(average["policy"]) == 12 and lines[1][f"{key}_average"] not in (lines[0][key], lines[1][key])
    assert "ckpt-3" in capsys.readouterr().out
    # From step 1 on, linear: only ckpt-3 is read and counts; its average is itself (the base, step 0, is not read).
    assert main(["eval", "--exploitability", "--run", str(tmp_path), "--all-checkpoints", "--env",
                 "KuhnPoker-v0-train", "--temperature", "1", "--top-p", "1", "--average-from", "1",
                 "--average-weights", "linear", "--out", str(tmp_path / "tail.json")]) == 0
    tail = [json.loads(x) for x in (tmp_path / "exploitability.jsonl").read_text().splitlines()][2:]
    assert [x["uid"] for x in tail] == ["ckpt-3"] and tail[0][key] == pytest.approx(lines[1][key], abs=1e-12)
    assert tail[0][f"{key}_average"] == pytest.approx(tail[0][key], abs=1e-12)
    saved = json.loads((tmp_path / "tail.json").read_text())
    assert (saved["checkpoints"], saved["average_from"], saved["average_weights"]) == (1, 1, "linear")
    assert "the linear average of the 1 checkpoints read from step 1" in capsys.readouterr().out
    # Every 2nd learner step: the base (step 0) is read, ckpt-3 is not.
    assert main(["eval", "--exploitability", "--run", str(tmp_path), "--all-checkpoints", "--env",
                 "KuhnPoker-v0-train", "--temperature", "1", "--top-p", "1", "--checkpoint-every", "2"]) == 0
    strided = [json.loads(x) for x in (tmp_path / "exploitability.jsonl").read_text().splitlines()][3:]
    assert [(x["uid"], x["learner_step"]) for x in strided] == [("base", 0)]


def test_legal_only_shares_the_other_mass_out_in_proportion():
    """A read table conditioned on a legal answer: 0.3 / 0.1 with 0.6 elsewhere -> 0.75 / 0.25; a state with no
    legal mass plays uniformly. On Kuhn's Nash table with a tenth of every state's mass moved off the legal moves,
    the plain reading pays for that mass (every non-answer is a fold) and the legal-only reading is Nash again."""
    from unstable.eval.exploitability import legal_only
    from unstable.eval.game_states import solved_game
    from unstable.eval.solvers.kuhn import INFO_SETS, kuhn_nash_table

    assert legal_only({"s": {"a": 0.3, "b": 0.1}, "t": {"a": 0.0, "b": 0.0}}) == {
        "s": {"a": pytest.approx(0.75, abs=1e-15), "b": pytest.approx(0.25, abs=1e-15)}, "t": {"a": 0.5, "b": 0.5}}
    game = solved_game("KuhnPoker-v0-train")
    nash = kuhn_nash_table(alpha=0.1)
    leaky = {state: {move: 0.9 * p for move, p in nash[state].items()} for state in INFO_SETS}
    assert game.exploitability(leaky)["exploitability"] > 0.05
    assert game.exploitability(legal_only(leaky))["exploitability"] == pytest.approx(0.0, abs=1e-12)


def test_exact_results_against_average_the_seats():
    """``--all-checkpoints`` lines carry the solver's results against each scripted player, seats averaged,
    and its tactics."""
    from unstable.eval.exploitability import exact_results_against
    from unstable.eval.solvers.tictactoe import tictactoe_exploitability, tictactoe_table
    from unstable.policies.baselines import tictactoe_heuristic_cells

    solver = tictactoe_exploitability(tictactoe_table(tictactoe_heuristic_cells)).to_dict()
    out = exact_results_against("TicTacToe-v0-train", solver)
    key = "eval/TicTacToe-v0-train/vs_heuristic"
    assert out[f"{key}_win"] == pytest.approx((solver["vs_heuristic_first"][0] + solver["vs_heuristic_second"][0]) / 2)
    assert out[f"{key}_win"] == pytest.approx(0.2426, abs=1e-3)  # the heuristic against itself
    assert {k.rsplit("/", 1)[1] for k in out} == {f"vs_{o}_{w}" for o in ("heuristic", "optimal", "random")
                                                  for w in ("win", "draw")} | {"win_now_mass", "block_mass"}
    assert out["eval/TicTacToe-v0-train/block_mass"] == solver["block_mass"] == pytest.approx(1.0)
    assert exact_results_against("KuhnPoker-v0-train", {"exploitability": 0.1}) == {}


def _sampled_kuhn_reading(table, samples, rng):
    """A sampled reading of the table policy ``table``: ``samples`` draws per information set."""
    from unstable.eval.policy_reading import MoveDistribution

    read = {}
    for name, probs in table.items():
        moves = list(probs)
        counts = rng.multinomial(samples, [probs[m] for m in moves])
        read[name] = MoveDistribution(probs={f"[{m}]": c / samples for m, c in zip(moves, counts, strict=True)},
                                      other=0.0, method="sampled", samples=samples)
    return read


def test_bootstrap_counts_out_of_range_are_refused_before_anything_runs():
    with pytest.raises(ValueError, match="bootstrap"):
        evaluate_exploitability("no/such-model", "KuhnPoker-v0-train", method="sampled", bootstrap=-1)
    from unstable.eval.exploitability import bootstrap_interval

    with pytest.raises(ValueError, match="replicates"):
        bootstrap_interval({}, lambda probs: 0.0, 0.1, replicates=0)


@pytest.mark.parametrize("policy", ["uniform", "nash"])
def test_the_bootstrap_interval_covers_the_true_exploitability(policy):
    """Readings of 200 samples per information set are drawn from a known Kuhn policy (uniform play,
    11/24 = 0.4583 chips a hand; the Nash policy, 0); the basic bootstrap interval of each covers the truth in
    most of 40 readings (the 95% level is not reached exactly at 0, where the estimate's upward bias is
    largest: 88% was measured over 60 readings with 200 replicates), while the estimate itself is biased up
    at the Nash policy."""
    import numpy as np

    from unstable.eval.exploitability import bootstrap_interval
    from unstable.eval.solvers.kuhn import kuhn_exploitability, kuhn_nash_table, uniform_kuhn_table

    table = uniform_kuhn_table() if policy == "uniform" else kuhn_nash_table()
    truth = kuhn_exploitability(table).exploitability
    assert truth == pytest.approx(11 / 24 if policy == "uniform" else 0.0, abs=1e-12)

    def solve(probs):
        table = {k: {m.strip("[]"): p for m, p in v.items()} for k, v in probs.items()}
        return kuhn_exploitability(table).exploitability

    rng = np.random.default_rng(7)
    covered, estimates = 0, []
    for trial in range(40):
        read = _sampled_kuhn_reading(table, 200, rng)
        estimate = solve({k: d.probs for k, d in read.items()})
        lo, hi = bootstrap_interval(read, solve, estimate, replicates=100, seed=trial)
        assert 0 <= lo <= hi
        covered += lo <= truth <= hi
        estimates.append(estimate)
    assert covered >= 32  # 80% of 40
    if policy == "nash":
        assert min(estimates) > 0  # a best response always finds some noise to exploit
