"""The warm start and the default job (``unstable quickstart``), shortened to seconds."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import pytest
import textarena as ta
import torch

from unstable.cli.quickstart import QuickstartConfig, run_quickstart
from unstable.games.extraction import answer_text, extract_boxed_action
from unstable.games.templates import board_view, render_prompt
from unstable.models.warmstart import (
    Position,
    WarmStartConfig,
    _encode,
    _loss,
    lr_scale,
    mixes,
    random_game_positions,
    warm_start_path,
)
from unstable.policies.scripted import legal_moves


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    return AutoTokenizer.from_pretrained(tiny_model_dir), AutoModelForCausalLM.from_pretrained(tiny_model_dir)


def test_board_view_keeps_the_last_board_and_moves_only():
    env = ta.make("TicTacToe-v0-train")
    env.reset(num_players=2, seed=3)
    env.step("[4]")
    _, obs = env.get_observation()
    view = board_view(obs)
    assert view.splitlines()[0] == "Current Board:"
    assert "Available Moves: '[0]', '[1]', '[2]', '[3]', '[5]'" in view
    assert "three in a row" not in view and "placed their symbol" not in view
    assert board_view("no board here\njust text") == "no board here\njust text"
    assert render_prompt("qwen3-board", obs).endswith("<|im_start|>assistant\n")


def test_random_game_positions_hold_the_legal_moves_and_keep_the_global_rng():
    random.seed(123)
    before = random.random()
    random.seed(123)
    positions = random_game_positions("TicTacToe-v0-train", 40, seed=1)
    assert random.random() == before  # TextArena's reseeding did not leak out
    assert len(positions) == 40
    assert positions == random_game_positions("TicTacToe-v0-train", 40, seed=1)
    env = ta.make("TicTacToe-v0-train")
    env.reset(num_players=2, seed=0)
    pid, obs = env.get_observation()
    assert random_game_positions("TicTacToe-v0-train", 1, seed=0)[0] == Position(obs, tuple(legal_moves(
        "TicTacToe-v0-train", env, pid)))
    # a longer draw extends a shorter one (rounds of the warm start take consecutive slices of one
    # stream), and the held-out stream plays other games
    assert random_game_positions("TicTacToe-v0-train", 100, seed=1)[:40] == positions
    held = random_game_positions("TicTacToe-v0-train", 40, seed=1, stream="held-out")
    assert held != positions and len(held) == 40


def test_few_moves_bias_keeps_late_positions_more_often():
    plain = random_game_positions("TicTacToe-v0-train", 400, seed=5)
    biased = random_game_positions("TicTacToe-v0-train", 400, seed=5, few_moves_bias=1.0)
    mean_moves = [sum(len(p.moves) for p in ps) / len(ps) for ps in (plain, biased)]
    assert mean_moves[1] < mean_moves[0] - 1.0  # 5.5 legal moves on average in random games, 4.0 biased
    share_one_move = [sum(len(p.moves) == 1 for p in ps) / len(ps) for ps in (plain, biased)]
    assert share_one_move[1] > 2 * share_one_move[0]


def test_answers_extract_to_their_moves():
    assert answer_text("[4]") == "\\boxed{4}"
    assert answer_text("[bet]") == "\\boxed{bet}"
    assert answer_text("[col 3]") == "\\boxed{col 3}"
    for move in ("[4]", "[bet]", "[col 3]", "[A1 B2]"):
        assert extract_boxed_action(answer_text(move)).action == move


def test_each_position_is_labelled_with_all_its_legal_moves(tiny):
    tok, _ = tiny
    position = random_game_positions("TicTacToe-v0-train", 3, seed=2)[2]
    ex = _encode(tok, "qwen3-board", position, tok.eos_token, random.Random(0))
    assert len(ex.choice_ids) == len(position.moves) == 7
    assert tok.decode(ex.ids[: ex.prompt_len]) == render_prompt("qwen3-board", position.observation)
    for choice, move in zip(ex.choice_ids, position.moves, strict=True):
        ids = list(ex.ids)
        ids[ex.choice_pos] = choice
        assert extract_boxed_action(tok.decode(ids[ex.prompt_len:])).action == move
    # a single legal move has no choice to spread: it is an ordinary (hard) label
    single = _encode(tok, "qwen3-board", Position(position.observation, ("[5]",)), tok.eos_token, random.Random(0))
    assert single.choice_pos is None


def _reference_loss(model, batch) -> dict[str, float]:
    """What ``_loss`` should give, one unpadded row at a time over all logits: the mean of the answer
    tokens' cross-entropies (at the move token, against the teacher's probabilities, uniform over its moves
    unless it mixes, all legal ones without a teacher), the mass on legal moves, how often the argmax is legal
    / the teacher's, and the total variation between the model's renormalised legal distribution and the
    teacher's."""
    terms, mass, legal, taught, tv = [], [], [], [], []
    with torch.no_grad():
        for e in batch:
            logp = torch.log_softmax(model(input_ids=torch.tensor([e.ids])).logits[0].float(), -1)
            for t in range(e.prompt_len, len(e.ids)):
                if t == e.choice_pos:
                    aims = e.target_ids or e.choice_ids
                    weights = torch.tensor(e.target_weights or [1.0] * len(aims), dtype=torch.float32)
                    weights = weights / weights.sum()
                    terms.append(-(logp[t - 1, list(aims)] * weights).sum())
                    mass.append(logp[t - 1, list(e.choice_ids)].exp().sum())
                    model_p = logp[t - 1, list(e.choice_ids)].exp() / mass[-1]
                    teacher_p = dict(zip(aims, weights.tolist(), strict=True))
                    tv.append(0.5 * sum(abs(float(m) - teacher_p.get(c, 0.0)) for m, c in zip(model_p, e.choice_ids,
                                                                                             strict=True)))
                    legal.append(float(int(logp[t - 1].argmax()) in e.choice_ids))
                    taught.append(float(int(logp[t - 1].argmax()) in aims))
                else:
                    terms.append(-logp[t - 1, e.ids[t]])
    return {"loss": torch.stack(terms).mean().item(), "legal_mass": torch.stack(mass).mean().item(),
            "greedy_legal": sum(legal) / len(legal), "greedy_teacher": sum(taught) / len(taught),
            "teacher_tv": sum(tv) / len(tv)}


def _assert_loss_matches_the_reference(model, batch, pad_id, greedy_key):
    """``_loss`` on ``batch`` equals :func:`_reference_loss`: the loss, ``legal_mass`` and ``greedy_key``."""
    with torch.no_grad():
        loss, stats = _loss(model, batch, pad_id)
    expected = _reference_loss(model, batch)
    assert loss.item() == pytest.approx(expected["loss"], abs=1e-4)
    assert stats["legal_mass"] == pytest.approx(expected["legal_mass"], abs=1e-5)
    assert stats[greedy_key] == pytest.approx(expected[greedy_key])
    assert stats["teacher_tv"] == pytest.approx(expected["teacher_tv"], abs=1e-5)


def test_answers_of_different_lengths_are_labelled_softly_where_they_part(tiny):
    """OpenSpiel's Leduc moves are one or two tokens for the tiny tokenizer (``[Call]``, ``[Fold]``,
    ``[Raise]``): the soft label goes on the first token where the answers part, one entry per distinct token,
    the answer the example goes on with is drawn by the teacher's weights, and the rest of it is labelled
    token by token. Two answers that share their parting token share its label, their weights added up."""
    tok, model = tiny
    answers = {m: tok(answer_text(m) + tok.eos_token, add_special_tokens=False).input_ids
               for m in ("[Fold]", "[Call]", "[Raise]", "[Raised]")}
    assert len({len(a) for a in answers.values()}) > 1  # the case this test is about
    leduc = Position("Moves: [Fold] [Call] [Raise]", ("[Fold]", "[Call]", "[Raise]"),
                     ("[Fold]", "[Call]", "[Raise]"), (0.1, 0.3, 0.6))
    drawn, rng = [], random.Random(0)
    for _ in range(1000):
        e = _encode(tok, "qwen3-board", leduc, tok.eos_token, rng, answers)
        part = e.choice_pos - e.prompt_len
        assert all(a[:part] == answers["[Fold]"][:part] for a in answers.values())
        assert e.choice_ids == tuple(answers[m][part] for m in leduc.moves)
        assert dict(zip(e.target_ids, e.target_weights, strict=True)) == {
            answers[m][part]: w for m, w in zip(leduc.moves, leduc.weights, strict=True)}
        drawn.append(next(m for m in leduc.moves if e.ids[e.prompt_len:] == answers[m]))
    shares = [drawn.count(m) / len(drawn) for m in leduc.moves]
    assert shares == pytest.approx(leduc.weights, abs=0.045)  # 3 standard errors of the largest
    if answers["[Raise]"][part] == answers["[Raised]"][part]:  # they part later: one token, weights summed
        e = _encode(tok, "qwen3-board", Position("x", ("[Call]", "[Raise]", "[Raised]")), tok.eos_token,
                    random.Random(0))
        assert e.choice_ids == (answers["[Call]"][part], answers["[Raise]"][part])
        assert e.target_weights == (1.0, 2.0)
    batch = [_encode(tok, "qwen3-board", leduc, tok.eos_token, random.Random(s)) for s in range(4)]
    _assert_loss_matches_the_reference(model, batch, tok.pad_token_id, "greedy_teacher")


def test_loss_is_cross_entropy_with_a_uniform_target_over_the_legal_moves(tiny):
    tok, model = tiny
    rng = random.Random(0)
    batch = [_encode(tok, "qwen3-board", p, tok.eos_token, rng)
             for p in random_game_positions("TicTacToe-v0-train", 5, seed=4)]
    _assert_loss_matches_the_reference(model, batch, tok.pad_token_id, "greedy_legal")


def test_loss_with_a_teacher_targets_the_teachers_moves_and_measures_the_legal_ones(tiny):
    """With the heuristic teacher the move token's target is uniform over the heuristic's cells, while
    ``legal_mass``/``greedy_legal`` still measure all legal moves and ``greedy_teacher`` the teacher's."""
    tok, model = tiny
    rng = random.Random(0)
    positions = [p for p in random_game_positions("TicTacToe-v0-train", 200, seed=4, few_moves_bias=1.0,
                                                  teacher="heuristic") if len(p.targets) < len(p.moves)][:5]
    batch = [_encode(tok, "qwen3-board", p, tok.eos_token, rng) for p in positions]
    assert all(e.choice_pos is not None and set(e.target_ids) < set(e.choice_ids) for e in batch)
    _assert_loss_matches_the_reference(model, batch, tok.pad_token_id, "greedy_teacher")


def test_the_nash_teacher_labels_kuhn_moves_with_the_equilibriums_probabilities(tiny):
    """Kuhn poker's ``nash`` teacher: each position's targets carry the equilibrium's probabilities for the
    card in the prompt (Kuhn 1950, alpha = 1/3: the opener bets a Jack 1/3 of the time, a King always ...), a
    move it never plays is left out (a Jack facing a bet folds), and the loss is the cross-entropy against
    those probabilities."""
    from fractions import Fraction

    from unstable.policies.baselines import kuhn_nash_probability

    positions = random_game_positions("KuhnPoker-v0-chips-train", 60, seed=2, teacher="nash")
    seen = set()
    for p in positions:
        card = "JQK".index(p.observation.split("Your card is: '")[1][0])
        facing_bet = p.moves == ("[fold]", "[call]")
        opens = "You are Player 1 " in p.observation  # player 1 opens the one hand of KuhnPoker-v0-chips
        prob = float(kuhn_nash_probability(card, opens, facing_bet))
        aggressive, passive = ("[call]", "[fold]") if facing_bet else ("[bet]", "[check]")
        expected = {aggressive: prob, passive: 1 - prob}
        assert dict(zip(p.targets, p.weights, strict=True)) == pytest.approx({m: q for m, q in expected.items()
                                                                             if q > 0}), p.observation[-200:]
        seen.add((card, opens, facing_bet))
    assert len(seen) == 12  # every information set of Kuhn poker
    one_third = dict(zip(*[next(p for p in positions if "Your card is: 'J'" in p.observation
                                and "submitted" not in p.observation).__getattribute__(a)
                           for a in ("targets", "weights")], strict=True))
    assert one_third == {"[bet]": pytest.approx(0.1 + 0.7 / 3), "[check]": pytest.approx(float(Fraction(2, 3)))}
    tok, model = tiny
    rng = random.Random(0)
    batch = [_encode(tok, "qwen3-board", p, tok.eos_token, rng) for p in positions[:6]]
    assert all(e.choice_pos is not None and e.target_weights for e in batch)
    _assert_loss_matches_the_reference(model, batch, tok.pad_token_id, "greedy_teacher")


def test_the_mixed_teacher_gives_each_position_its_own_seeded_random_mixture(tiny):
    """``teacher="mixed"``: the target of each Kuhn position is a distribution over its legal moves drawn from
    the flat Dirichlet, the same whenever the same position (the same text) comes again and another under
    another seed, and differing between hands: the thing the uniform target lacks. The flat Dirichlet on
    two moves is uniform on [0, 1]: its draws' mean is 1/2 and variance 1/12."""
    from unstable.models.warmstart import random_mixture

    draws = [random_mixture(f"key {i}", 2)[0] for i in range(4000)]
    assert sum(draws) / len(draws) == pytest.approx(0.5, abs=0.015)
    assert sum((d - 0.5) ** 2 for d in draws) / len(draws) == pytest.approx(1 / 12, abs=0.005)
    assert random_mixture("key 0.1", 3) == random_mixture("key 0.1", 3) != random_mixture("key 0.2", 3)
    assert sum(random_mixture("key 0.1", 3)) == pytest.approx(1.0)
    positions = random_game_positions("KuhnPoker-v0-chips-train", 60, seed=2, teacher="mixed")
    by_text = {}
    for p in positions:
        assert p.targets == p.moves and len(p.weights) == len(p.moves) and sum(p.weights) == pytest.approx(1.0)
        assert by_text.setdefault(p.observation, p.weights) == p.weights
    assert len({p.weights for p in positions}) == len(by_text) > 6  # a hand of its own, each
    other_seed = {p.observation: p.weights for p in random_game_positions("KuhnPoker-v0-chips-train", 60, seed=3,
                                                                            teacher="mixed")}
    assert all(other_seed[o] != w for o, w in by_text.items() if o in other_seed)
    assert mixes(WarmStartConfig(env_id="KuhnPoker-v0-chips-train", teacher="mixed"))
    tok, model = tiny
    batch = [_encode(tok, "qwen3-hand", p, tok.eos_token, random.Random(0)) for p in positions[:6]]
    _assert_loss_matches_the_reference(model, batch, tok.pad_token_id, "greedy_teacher")


def test_warm_start_learns_and_is_cached(tiny_model_dir, tmp_path):
    cfg = WarmStartConfig(positions=512, batch_size=32, learning_rate=3e-3, warmup_steps=2, max_rounds=1)
    seen = []
    path, cached = warm_start_path(tiny_model_dir, cfg, cache_dir=tmp_path, progress=lambda *a: seen.append(a))
    assert not cached and (path / "config.json").is_file() and (path / "tokenizer.json").is_file()
    assert json.loads((path / "warm_start.json").read_text())["positions"] == 512
    first, last = seen[0][2], seen[-1][2]
    assert seen[-1][:2] == (16, 16)
    assert last["loss"] < first["loss"] - 1.0 and last["legal_mass"] > 5 * first["legal_mass"]
    again, cached = warm_start_path(tiny_model_dir, cfg, cache_dir=tmp_path)
    assert cached and again == path
    other, cached = warm_start_path(tiny_model_dir, WarmStartConfig(positions=64, batch_size=32), cache_dir=tmp_path)
    assert not cached and other != path


def test_a_teacher_is_its_own_cache_entry_and_the_default_keeps_the_old_key(tiny_model_dir, tmp_path, monkeypatch):
    """The heuristic teacher builds its own warm start; the random teacher's key is the one it had before the
    setting existed (the settings without ``teacher``, and without ``target_teacher_tv``, which only a mixing
    teacher reads), so users' cached warm starts stay valid; the Kuhn ``nash`` teacher's key holds it."""
    import dataclasses

    from unstable.models import warmstart

    built = []
    monkeypatch.setattr(warmstart, "warm_start", lambda base, path, cfg, progress=None: (
        built.append(cfg.teacher), path.mkdir(parents=True), (path / "warm_start.json").write_text("{}")))
    plain, _ = warm_start_path(tiny_model_dir, WarmStartConfig(), cache_dir=tmp_path)
    taught, _ = warm_start_path(tiny_model_dir, WarmStartConfig(teacher="heuristic"), cache_dir=tmp_path)
    assert plain != taught and built == ["random", "heuristic"]
    settings = {k: v for k, v in dataclasses.asdict(WarmStartConfig()).items()
                if k not in ("teacher", "target_teacher_tv")}
    old, cached = warmstart.cached_warm_start(tiny_model_dir, settings, warmstart.WARM_START_VERSION,
                                              "TicTacToe-v0-train", tmp_path, lambda base, path: None)
    assert cached and old == plain
    kuhn = WarmStartConfig(env_id="KuhnPoker-v0-chips-train", teacher="nash")
    loose, _ = warm_start_path(tiny_model_dir, replace(kuhn, target_teacher_tv=0.1), cache_dir=tmp_path)
    assert warm_start_path(tiny_model_dir, kuhn, cache_dir=tmp_path)[0] != loose
    assert warm_start_path(tiny_model_dir, replace(WarmStartConfig(), target_teacher_tv=0.1),
                           cache_dir=tmp_path) == (plain, True)


def test_warm_start_trains_in_rounds_until_the_target(tiny_model_dir, tmp_path):
    """Rounds of fresh positions until the held-out legal-move probability reaches the target."""
    short = WarmStartConfig(positions=128, batch_size=32, warmup_steps=1, held_out=64)
    rounds = {}
    for target, max_rounds in ((0.0, 3), (1.0, 3)):  # both targets: the probability and the greedy share
        seen = []
        path, _ = warm_start_path(tiny_model_dir, replace(short, target_legal_mass=target, target_greedy_legal=target,
                                                          max_rounds=max_rounds),
                                  cache_dir=tmp_path, progress=lambda *a, seen=seen: seen.append(a))
        rounds[target] = json.loads((path / "warm_start.json").read_text())["rounds"]
        ends = [stats for step, total, stats in seen if step == total]
        assert [s["round"] for s in ends] == list(range(1, len(rounds[target]) + 1))
        assert [s["held_out_legal_mass"] for s in ends] == [r["held_out_legal_mass"] for r in rounds[target]]
        assert all(0 <= r["held_out_greedy_legal"] <= 1 for r in rounds[target])
    assert len(rounds[0.0]) == 1  # any mass reaches 0: one round, as before rounds existed
    assert len(rounds[1.0]) == 3  # never reached: stops at max_rounds
    assert rounds[0.0][0] == rounds[1.0][0]  # the first round does not depend on the target
    masses = [r["held_out_legal_mass"] for r in rounds[1.0]]
    assert all(0 < m < 1 for m in masses) and masses[-1] > masses[0]


def test_a_mixing_teacher_trains_until_its_distribution_is_close_enough(tiny_model_dir, tmp_path):
    """Kuhn's ``nash`` teacher on ``qwen3-hand``: with the legal-move targets at 0, the rounds go on until the
    held-out total variation from the teacher's mixture reaches ``target_teacher_tv`` (1: at once; 0: never,
    so ``max_rounds``), and it falls as the model learns the card-dependent probabilities."""
    short = WarmStartConfig(env_id="KuhnPoker-v0-chips-train", prompt_template="qwen3-hand", teacher="nash",
                            positions=512, batch_size=32, warmup_steps=1, held_out=64, target_legal_mass=0.0,
                            target_greedy_legal=0.0)
    rounds = {}
    for tv in (1.0, 0.0):
        path, _ = warm_start_path(tiny_model_dir, replace(short, target_teacher_tv=tv, max_rounds=3),
                                  cache_dir=tmp_path)
        rounds[tv] = json.loads((path / "warm_start.json").read_text())["rounds"]
    assert len(rounds[1.0]) == 1 and len(rounds[0.0]) == 3
    distances = [r["held_out_teacher_tv"] for r in rounds[0.0]]
    assert all(0 < d < 1 for d in distances) and distances[-1] < distances[0], distances


def test_a_round_that_lowers_the_held_out_legal_mass_is_undone(tiny_model_dir, tmp_path, monkeypatch):
    """The held-out reading is scripted (0.3 then 0.2, or 0.3, 0.4, 0.39) so the rule is tested apart from
    whether a real round happens to get worse: a worse second round leaves exactly the first round's
    weights (those of a one-round build) and stops; a better one is kept."""
    from transformers import AutoModelForCausalLM

    from unstable.models import warmstart

    short = WarmStartConfig(positions=64, batch_size=32, warmup_steps=1, held_out=8, max_rounds=3,
                            target_legal_mass=1.0)

    def build(name, masses, max_rounds=3):
        readings = iter(masses)
        monkeypatch.setattr(warmstart, "held_out_legality", lambda *a: {
            "legal_mass": next(readings), "greedy_legal": 0.5, "greedy_teacher": 0.5})
        seen = []
        path = warmstart.warm_start(tiny_model_dir, tmp_path / name, replace(short, max_rounds=max_rounds),
                                    progress=lambda *a: seen.append(a[2]))
        rounds = json.loads((path / "warm_start.json").read_text())["rounds"]
        return AutoModelForCausalLM.from_pretrained(path).state_dict(), rounds, seen

    one_round, _, _ = build("one", [0.3], max_rounds=1)
    worse, rounds, seen = build("worse", [0.3, 0.2, 0.9])
    assert [r.get("undone", False) for r in rounds] == [False, True] and seen[-1]["undone"]
    assert all(torch.equal(one_round[k], worse[k]) for k in one_round)
    better, rounds, _ = build("better", [0.3, 0.4, 0.39])  # a drop within UNDO_DROP is not undone
    assert len(rounds) == 3 and not any(r.get("undone") for r in rounds)
    assert not all(torch.equal(one_round[k], better[k]) for k in one_round)


def test_the_warm_start_learning_rate_warms_up_linearly_then_decays_by_half_a_cosine_to_a_tenth():
    # warm-up: (step + 1) / warmup; after it 0.1 + 0.45 * (1 + cos(pi * frac)), SGDR's eq. 5 with a 10% floor
    assert lr_scale(0, 100, 30) == pytest.approx(1 / 30)
    assert lr_scale(29, 100, 30) == pytest.approx(1.0)
    assert lr_scale(30, 100, 30) == pytest.approx(1.0)
    assert lr_scale(65, 100, 30) == pytest.approx(0.55)  # halfway through the decay: cos(pi / 2) = 0
    assert lr_scale(100, 100, 30) == pytest.approx(0.1)
    assert lr_scale(3, 10, 0) == pytest.approx(0.1 + 0.45 * (1 + math.cos(0.3 * math.pi)))


def test_bad_warm_start_settings_fail_early(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="positions"):
        WarmStartConfig(positions=0)
    with pytest.raises(ValueError, match="template"):
        WarmStartConfig(prompt_template="nope")
    with pytest.raises(ValueError):
        WarmStartConfig(env_id="NotAGame-v0")
    for name, bad in (("weight_decay", -0.1), ("weight_decay", math.nan), ("few_moves_bias", -1.0),
                      ("target_legal_mass", 1.1), ("target_greedy_legal", -0.1), ("max_rounds", 0),
                      ("held_out", 0), ("target_teacher_tv", 1.1), ("target_teacher_tv", math.nan)):
        with pytest.raises(ValueError, match=name):
            WarmStartConfig(**{name: bad})
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        warm_start_path(tmp_path / "missing", cache_dir=tmp_path)
    with pytest.raises(ValueError, match=r"teacher must be one of \['random', 'mixed', 'heuristic', 'optimal'\]"):
        WarmStartConfig(teacher="minimax")
    with pytest.raises(ValueError, match=r"one of \['random', 'mixed', 'nash'\] for 'KuhnPoker-v0-train'"):
        WarmStartConfig(env_id="KuhnPoker-v0-train", teacher="heuristic")


@pytest.mark.parametrize("teacher", ["heuristic", "optimal"])
def test_a_teacher_labels_the_moves_its_baseline_picks_from(teacher):
    """Every position's targets are the baseline's cells on that board (the heuristic: winning, else
    blocking, else all; the optimal player: the minimax-best), read back from the observation's board;
    the random teacher leaves the targets to the legal moves."""
    from unstable.policies.baselines import tictactoe_heuristic_cells, tictactoe_optimal_cells, tictactoe_symbol

    cells_for = {"heuristic": tictactoe_heuristic_cells, "optimal": tictactoe_optimal_cells}[teacher]
    positions = random_game_positions("TicTacToe-v0-train", 300, seed=3, few_moves_bias=1.0, teacher=teacher)
    narrowed = 0
    for p in positions:
        rows = [line for line in p.observation.splitlines() if line.count("|") == 2]
        cells = [c.strip() for row in rows[-3:] for c in row.split("|")]
        board = tuple(c if c in ("X", "O") else "" for c in cells)
        mark = "O" if board.count("O") == board.count("X") else "X"  # player 0 plays O and moves first
        assert mark == tictactoe_symbol(0 if mark == "O" else 1)
        assert p.targets == tuple(f"[{c}]" for c in cells_for(board, mark))
        assert set(p.targets) <= set(p.moves)
        narrowed += set(p.targets) != set(p.moves)
    assert narrowed > 50  # a win, a block or a losing cell exists in many positions
    assert all(p.targets == () for p in random_game_positions("TicTacToe-v0-train", 50, seed=3))


def test_quickstart_passes_sampler_settings_and_refuses_unknown_ones():
    cfg = QuickstartConfig(opponent_sampling_strategy="pfsp", fixed_opponents=["heuristic"],
                           samplers={"pfsp_weighting": "even"})
    assert cfg.samplers == {"pfsp_weighting": "even"}
    with pytest.raises(ValueError, match="pfsp_weighting must be one of"):
        QuickstartConfig(opponent_sampling_strategy="pfsp", samplers={"pfsp_weighting": "sometimes"})
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['fixed_opponents'\] \(set them at the top level\)"):
        QuickstartConfig(samplers={"fixed_opponents": ["heuristic"]})


def test_nfsp_self_play_leaves_the_opponent_seat_to_the_average_and_needs_its_reservoir():
    """Mirror self-play trained both seats, so build() refused average_eta, after the warm start. The job's
    config builds the BuildConfig it will pass to build(), so what build() refuses is refused at once."""
    nfsp = QuickstartConfig(learner={"average_reservoir": 1000}, samplers={"average_eta": 0.1})
    assert (QuickstartConfig()._trained_seats(), nfsp._trained_seats()) == (2, 1)
    assert nfsp.build_kwargs("m")["train_envs"][0].num_actors == 1
    with pytest.raises(ValueError, match=r"average_eta=0.1 .*YAML: learner: \{average_reservoir: 20000\}"):
        QuickstartConfig(samplers={"average_eta": 0.1})


def test_the_quickstart_says_who_the_learner_plays():
    """The first line named every job "self-play", a psro or league job too."""
    assert QuickstartConfig().describe_training() == "self-play"
    assert QuickstartConfig(opponent_sampling_strategy="psro").describe_training() == "psro opponents"
    assert QuickstartConfig(league={"exploiters": 2}).describe_training() == "a league: pfsp, 2 exploiters"
    assert QuickstartConfig(league={}).describe_training() == "a league: pfsp, 1 exploiter"


@pytest.mark.slow
def test_quickstart_runs_end_to_end(ray_session, tmp_path, monkeypatch, capsys):
    """A few learner steps of the default job, stopped by Ctrl-C after its first checkpoint and resumed with
    ``quickstart --resume RUN_DIR`` (its own settings, its reward transforms too, which ``train --resume``
    cannot restore): summary, evaluations, plots, transcripts, replay."""
    import time

    import unstable.cli.quickstart as qs
    from unstable.cli.commands import main

    monkeypatch.setenv("UNSTABLE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "qs"

    def interrupted(run, total, say):  # Ctrl-C once the first checkpoint is written
        deadline = time.monotonic() + 120
        while not (out / "checkpoints" / "ckpt-1" / "COMPLETE").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        raise KeyboardInterrupt

    real = qs.wait_with_progress
    monkeypatch.setattr(qs, "wait_with_progress", interrupted)
    assert main(["quickstart", "--out", str(out), "--learning-steps", "2", "--eval-games", "8",
                 "--warm-start-positions", "256", "--batch-size", "16", "--eval-workers", "1"]) == 130
    assert f"go on: unstable quickstart --resume {out}" in capsys.readouterr().err
    monkeypatch.setattr(qs, "wait_with_progress", real)
    assert main(["quickstart", "--resume", str(out)]) == 0
    text = capsys.readouterr().out
    assert "(resumed at learner step " in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env_id"] == "TicTacToe-v0-train" and summary["learner_steps"] == 2
    for which in ("initial", "final"):
        e = summary["eval"][which]
        assert e["games"] == 8 and 0 <= e["ci95"][0] <= e["win_rate"] <= e["ci95"][1] <= 1
    assert summary["eval"]["final"]["adapter"].endswith("ckpt-2")
    assert summary["wall_s"] > 0 and isinstance(summary["improved"], bool) and isinstance(summary["worse"], bool)
    # 256 warm-start positions are too few to learn the rules: the job says so, in the summary too
    short = summary["eval"]["initial"]["invalid_move_rate"] > 0.01
    assert ("warning: the warm start still makes invalid moves" in text) == short
    assert bool(summary["warnings"]) == short
    assert (out / "checkpoints" / "ckpt-2" / "adapter_config.json").is_file()
    # the default schedule decays linearly: the second (last) of two updates runs at half the peak
    lrs = [row["train/lr"] for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
           if "train/lr" in row]
    assert lrs == pytest.approx([summary["config"]["learning_rate"], summary["config"]["learning_rate"] / 2])
    assert {p.name for p in (out / "plots").glob("*.png")} >= {"training.png", "move_quality.png"}
    assert "learner step   2/2" in text and "win rate vs the random-legal-move baseline" in text
    assert json.loads((out / "eval_final.json").read_text())["overall"]["games"] == 8
    # the run directory is a Tracker run: replay reads its games
    assert main(["replay", str(out), "--last", "1"]) == 0
    assert "TicTacToe-v0-train" in capsys.readouterr().out
    with pytest.raises(FileExistsError):
        run_quickstart(QuickstartConfig(out=str(out)), say=lambda _: None)
    assert main(["quickstart", "--resume", str(out)]) == 2
    assert "is a finished quickstart run" in capsys.readouterr().err


def test_a_valid_task_answer_has_the_right_form_right_or_wrong():
    from unstable.models.task_warmstart import valid_answer

    row = {"items": [3, 1, 3], "level": 3, "answer": "1 3 3"}
    assert valid_answer(row, "\\boxed{1 3 3}") and valid_answer(row, "so \\boxed{3 1 3}")
    assert not valid_answer(row, "\\boxed{1 3}") and not valid_answer(row, "\\boxed{1 1 3}")
    assert not valid_answer(row, "1 3 3")  # no box
    sums = {"level": 1, "a": 4, "b": 5, "answer": "9"}
    assert valid_answer(sums, "\\boxed{17}") and valid_answer(sums, "\\boxed{0}")
    assert not valid_answer(sums, "\\boxed{19}") and not valid_answer(sums, "\\boxed{-1}")
    assert not valid_answer(sums, "\\boxed{nine}")


def test_the_task_warm_start_trains_in_rounds_until_its_answers_are_valid(tiny_model_dir, tmp_path):
    from unstable.models.task_warmstart import TaskWarmStartConfig, task_warm_start

    seen = []
    cfg = TaskWarmStartConfig(examples=64, held_out=8, max_rounds=2, target_valid=1.0, warmup_steps=0)
    out = task_warm_start(tiny_model_dir, tmp_path / "ws", cfg, on_round=lambda r, valid: seen.append((r, valid)))
    rounds = json.loads((out / "warm_start.json").read_text())["rounds"]
    assert [r["round"] for r in rounds] == [r for r, _ in seen] == [1, 2]  # one step each cannot reach 100%
    assert all(r["examples"] == 64 and 0 <= r["held_out_valid"] < 1 for r in rounds)
    easy = task_warm_start(tiny_model_dir, tmp_path / "easy", TaskWarmStartConfig(
        examples=64, held_out=8, max_rounds=3, target_valid=0.0, warmup_steps=0))
    assert len(json.loads((easy / "warm_start.json").read_text())["rounds"]) == 1  # reached at once: one round
    with pytest.raises(ValueError, match=r"target_valid must be within \[0, 1\], got 1.5"):
        TaskWarmStartConfig(target_valid=1.5)


@pytest.mark.slow
def test_task_quickstart_runs_end_to_end(ray_session, tmp_path, monkeypatch, capsys):
    """A few GRPO steps of the single-turn job: held-out sorting lists evaluated before and after, a summary."""
    from unstable.cli.commands import main

    monkeypatch.setenv("UNSTABLE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "task"
    assert main(["quickstart-task", "--out", str(out), "--learning-steps", "2", "--eval-problems", "16",
                 "--warm-start-examples", "256", "--batch-size", "32", "--num-samples", "4"]) == 0
    text = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["task"], summary["level"], summary["learner_steps"]) == ("sorting", 3, 2)
    assert summary["config"]["warm_start"]["examples"] == 256
    for which in ("initial", "final"):
        e = summary["eval"][which]
        assert (e["episodes"], e["failed"], e["eval_set"]) == (16, 0, "test")
        assert 0 <= e["success_ci95"][0] <= e["success_rate"] <= e["success_ci95"][1] <= 1
        assert 1 <= e["distinct_answers"] <= 16
    assert summary["eval"]["final"]["adapter"].endswith("ckpt-2")
    assert (out / "checkpoints" / "ckpt-2" / "adapter_config.json").is_file()
    assert "learner step   2/2" in text and "exact-match accuracy on 16 held-out problems" in text


def test_bad_quickstart_settings_are_clear_errors_before_any_work(tmp_path, capsys):
    from dataclasses import replace

    from unstable.cli.commands import main
    from unstable.cli.quickstart import QuickstartConfig

    with pytest.raises(ValueError, match="learning_steps"):
        QuickstartConfig(learning_steps=0)
    with pytest.raises(ValueError, match="lr_schedule"):
        QuickstartConfig(lr_schedule="cosine")
    with pytest.raises(ValueError, match="multiple of mini_batch_size"):
        QuickstartConfig(batch_size=100, mini_batch_size=64)
    with pytest.raises(ValueError, match=r"warm_start\.env_id"):
        QuickstartConfig(warm_start=replace(WarmStartConfig(), env_id="KuhnPoker-v0-train"))
    with pytest.raises(ValueError, match="mode='sync' trains every move on the version that played it"):
        QuickstartConfig(mode="sync")  # max_staleness stays 8
    QuickstartConfig(mode="sync", max_staleness=0)
    with pytest.raises(ValueError, match=r"fixed_opponents \['heuristic'\] would never play: .*'mirror' is self-play"):
        QuickstartConfig(fixed_opponents=["heuristic"])  # build() said so too, after the warm start
    QuickstartConfig(fixed_opponents=["heuristic"], opponent_sampling_strategy="fixed")
    with pytest.raises(ValueError, match="temperature"):
        QuickstartConfig(temperature=0)
    with pytest.raises(ValueError, match=r"top_p must be a finite number in \(0, 1\]"):
        QuickstartConfig(top_p=0)
    # GRPO's default ratio to the behaviour policy can't honour a nucleus: refused before the warm start
    with pytest.raises(ValueError, match=r"top_p'\]=0.99 with algorithm='grpo'.*off_policy_correction='none'"):
        QuickstartConfig(top_p=0.99, algorithm="grpo")
    nucleus = QuickstartConfig(top_p=0.99, algorithm="grpo", learner={"off_policy_correction": "none"})
    assert nucleus.build_kwargs("tiny")["vllm_config"] == {"top_p": 0.99}
    with pytest.raises(ValueError, match=r"lora_target_modules must be a non-empty list .* got 'q_proj'"):
        QuickstartConfig(lora_target_modules="q_proj")
    attention = QuickstartConfig(lora_target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    assert attention.build_kwargs("tiny")["lora_config"]["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert "target_modules" not in QuickstartConfig().build_kwargs("tiny")["lora_config"]  # build()'s default
    # a module the tiny model lacks: refused once the model exists, before the warm start's minutes
    said: list[str] = []
    with pytest.raises(ValueError, match=r"lora_target_modules names \['qproj'\], which the model .* does not have"):
        run_quickstart(QuickstartConfig(out=str(tmp_path / "m"), lora_target_modules=["qproj"]), say=said.append)
    assert not any(line.startswith("[2/5]") for line in said)
    assert main(["quickstart", "--out", str(tmp_path / "q"), "--learning-steps", "0"]) == 2
    assert "learning_steps" in capsys.readouterr().err
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "summary.json").write_text("{}")
    assert main(["quickstart", "--out", str(tmp_path / "used")]) == 2
    assert "already holds files" in capsys.readouterr().err


def test_bad_task_quickstart_settings_are_clear_errors_before_any_work(tmp_path, capsys, monkeypatch):
    from unstable.cli.commands import main
    from unstable.cli.task_quickstart import TaskQuickstartConfig

    assert TaskQuickstartConfig(batch_size=96).mini_batch_size == 32  # the default divides the batch
    with pytest.raises(ValueError, match=r"^batch_size \(100\) must be a multiple of mini_batch_size \(64\)$"):
        TaskQuickstartConfig(batch_size=100, mini_batch_size=64)
    monkeypatch.setenv("UNSTABLE_CACHE", str(tmp_path / "cache"))
    # more held-out problems than the task has, and a level it does not have: refused before the warm start
    assert main(["quickstart-task", "--out", str(tmp_path / "a"), "--eval-problems", "501"]) == 2
    assert "has 500 distinct held-out lists; got num_problems=501" in capsys.readouterr().err
    assert main(["quickstart-task", "--out", str(tmp_path / "b"), "--level", "9"]) == 2
    assert "length must be an int from 2 to 8, got 9" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()


def test_quickstart_config_files_load_and_misspelt_settings_are_refused(tmp_path):
    from pathlib import Path

    from unstable.cli.quickstart import load_quickstart_config

    recipe = Path(__file__).resolve().parent.parent / "configs" / "tictactoe-vs-heuristic.yaml"
    cfg = load_quickstart_config(str(recipe), out=str(tmp_path / "run"))
    assert (cfg.algorithm, cfg.opponent_sampling_strategy, cfg.fixed_opponents, cfg.eval_opponent) == (
        "grpo", "fixed", ["heuristic"], "heuristic")
    assert cfg.out == str(tmp_path / "run") and cfg.learner == {"beta": 0.1}
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: grpo\nopponent: heuristic\n")
    with pytest.raises(ValueError, match=r"unknown quickstart settings \['opponent'\]"):
        load_quickstart_config(str(bad))
    bad.write_text("opponent_sampling_strategy: league\n")
    with pytest.raises(ValueError, match="opponent_sampling_strategy must be one of"):
        load_quickstart_config(str(bad), out=str(tmp_path / "x"))
    # one name as a string is that name, as build() reads it (it was split into letters and refused 101 s in)
    one = tmp_path / "one.yaml"
    one.write_text("opponent_sampling_strategy: fixed\nfixed_opponents: random\n")
    assert load_quickstart_config(str(one)).fixed_opponents == ["random"]


def test_the_recommended_algorithm_recipe_loads(tmp_path):
    from pathlib import Path

    from unstable.cli.quickstart import load_quickstart_config

    recipe = Path(__file__).resolve().parent.parent / "configs" / "quickstart-grpo-kl.yaml"
    cfg = load_quickstart_config(str(recipe), out=str(tmp_path / "run"))
    assert (cfg.algorithm, cfg.learner, cfg.learning_steps) == ("grpo", {"beta": 0.1}, 100)


def test_the_league_recipes_load(tmp_path):
    """The recipes of docs/training.md's results: TicTacToe's heuristic-taught warm start and pfsp; KuhnPoker's
    mirror self-play and pfsp, on TextArena's prompt and on qwen3-hand."""
    from pathlib import Path

    from unstable.cli.quickstart import load_quickstart_config

    configs = Path(__file__).resolve().parent.parent / "configs"
    taught = load_quickstart_config(str(configs / "tictactoe-league-heuristic.yaml"), out=str(tmp_path / "a"))
    assert (taught.warm_start.teacher, taught.fixed_opponents, taught.eval_opponent) == (
        "heuristic", ["heuristic"], "heuristic")
    pfsp = load_quickstart_config(str(configs / "tictactoe-pfsp-heuristic.yaml"), out=str(tmp_path / "b"))
    assert (pfsp.opponent_sampling_strategy, pfsp.fixed_opponents, pfsp.samplers) == (
        "pfsp", ["heuristic", "random"], {"pfsp_weighting": "hard"})
    psro = load_quickstart_config(str(configs / "tictactoe-psro-heuristic.yaml"), out=str(tmp_path / "c"))
    assert (psro.opponent_sampling_strategy, psro.samplers["psro_every"], psro.learning_steps) == ("psro", 10, 60)
    league = load_quickstart_config(str(configs / "league-exploiters-heuristic.yaml"), out=str(tmp_path / "d"))
    assert (league.league["exploiters"], league._league_opponents(), league.learning_steps) == (1, "pfsp", 30)
    for name, strategy, steps in (("tictactoe-grid-vs-heuristic.yaml", "fixed", 60),
                                  ("tictactoe-grid-selfplay.yaml", "mirror", 30)):
        grid = load_quickstart_config(str(configs / name), out=str(tmp_path / name))
        assert (grid.prompt_template, grid.warm_start.prompt_template, grid.warm_start.teacher,
                grid.warm_start.max_rounds, grid.opponent_sampling_strategy, grid.learning_steps) == (
            "qwen3-grid", "qwen3-grid", "optimal", 20, strategy, steps)
    for name, strategy in (("kuhn-grpo-kl.yaml", "mirror"), ("kuhn-pfsp.yaml", "pfsp")):
        kuhn = load_quickstart_config(str(configs / name), out=str(tmp_path / name))
        assert (kuhn.env_id, kuhn.warm_start.env_id, kuhn.opponent_sampling_strategy, kuhn.batch_size) == (
            "KuhnPoker-v0-train", "KuhnPoker-v0-train", strategy, 128)
    for name, strategy, teacher in (("kuhn-hand-nash-selfplay.yaml", "mirror", "nash"),
                                    ("kuhn-hand-nash-pfsp.yaml", "pfsp", "nash"),
                                    ("kuhn-hand-selfplay.yaml", "mirror", "random")):
        hand = load_quickstart_config(str(configs / name), out=str(tmp_path / name))
        assert (hand.env_id, hand.warm_start.env_id, hand.prompt_template, hand.warm_start.prompt_template,
                hand.warm_start.teacher, hand.opponent_sampling_strategy) == (
            "KuhnPoker-v0-chips-train", "KuhnPoker-v0-chips-train", "qwen3-hand", "qwen3-hand", teacher, strategy)


def test_a_quickstart_config_for_another_game_warm_starts_on_that_game(tmp_path):
    """A YAML naming only ``env_id`` was refused ("warm_start.env_id ... must match env_id"): the warm
    start now follows the job's game and template unless the file gives its own."""
    from unstable.cli.quickstart import load_quickstart_config

    recipe = tmp_path / "kuhn.yaml"
    recipe.write_text("env_id: KuhnPoker-v0-train\nprompt_template: qwen3-task\n")
    cfg = load_quickstart_config(str(recipe))
    assert (cfg.warm_start.env_id, cfg.warm_start.prompt_template) == ("KuhnPoker-v0-train", "qwen3-task")
    recipe.write_text("env_id: KuhnPoker-v0-train\nwarm_start: {env_id: TicTacToe-v0-train}\n")
    with pytest.raises(ValueError, match="must match env_id"):  # a contradiction the file wrote is still refused
        load_quickstart_config(str(recipe))


def test_a_misspelt_opponent_is_refused_before_the_warm_start(tmp_path, monkeypatch):
    """``eval_opponent: heurstic`` was read as an API model and refused for want of a key only after the warm
    start (minutes on a fresh machine); now before it, with the scripted name it may have meant."""
    import unstable.cli.quickstart as qs
    import unstable.models.warmstart as warmstart

    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    monkeypatch.setattr(warmstart, "warm_start_path", lambda *a, **k: pytest.fail("the warm start ran"))
    with pytest.raises(ValueError, match=r"opponent 'heurstic' is not a scripted policy.*did you mean 'heuristic'"):
        qs.run_quickstart(qs.QuickstartConfig(out=str(tmp_path / "q"), eval_opponent="heurstic"), say=lambda _: None)
    with pytest.raises(ValueError, match=r"opponent 'optimall'.*did you mean 'optimal'"):
        qs.run_quickstart(qs.QuickstartConfig(out=str(tmp_path / "q"), opponent_sampling_strategy="fixed",
                                              fixed_opponents=["optimall"]), say=lambda _: None)
