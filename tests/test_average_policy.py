"""NFSP's average policy (Heinrich & Silver 2016, arXiv 1603.01121): a reservoir of the policy's own
moves and a second adapter trained on it by supervised learning.

The matrix-game test runs the learner's own losses on softmax tables in self-play on biased
rock-paper-scissors (the payoffs and equilibrium of tests/test_magnet.py): the RL table (the "best
response", :func:`unstable.algorithms.policy_loss` with a small entropy bonus) plays against the average
table in a share ``1 - eta`` of its games and against itself otherwise; its own moves go into the
reservoir; the average table is fitted to reservoir minibatches by the cross-entropy the learner uses
(:func:`unstable.algorithms.masked_mean` of ``-log pi``). The last iterate runs away, the average
converges.
"""

import pytest
import torch
from test_magnet import BRPS, NASH, adapter_state, batch_of, same
from test_packed_batches import FAST

from unstable.algorithms import masked_mean, policy_loss
from unstable.learners import GRPOLearner, LearnerConfig
from unstable.learners import model_utils as mu
from unstable.learners.average import AVERAGE_ADAPTER
from unstable.learners.reservoir import Reservoir


# ------------------------------------------------------------------------------- the reservoir
def test_the_reservoir_keeps_a_uniform_sample_of_everything_offered():
    """Known answer: after n items each is kept with probability capacity / n (algorithm R)."""
    n, capacity, trials = 20, 5, 4000
    counts = [0] * n
    for seed in range(trials):
        res = Reservoir(capacity, seed=seed)
        res.extend(range(n))
        assert len(res) == capacity and res.seen == n
        for item in res.items:
            counts[item] += 1
    expected = trials * capacity / n  # 1000; binomial sd ~ 27
    assert all(abs(c - expected) < 5 * 27 for c in counts), counts


def test_the_reservoir_fills_first_and_samples_distinct_items():
    res = Reservoir(3, seed=0)
    res.extend("ab")
    assert res.items == ["a", "b"] and sorted(res.sample(5)) == ["a", "b"]
    res.extend("cdefg")
    assert len(res) == 3 and len(set(res.sample(3))) == 3


def test_a_restored_reservoir_continues_exactly():
    a = Reservoir(4, seed=1)
    a.extend(range(10))
    b = Reservoir(4, seed=99)
    b.load_state_dict(a.state_dict())
    a.extend(range(10, 30))
    b.extend(range(10, 30))
    assert a.items == b.items and a.sample(2) == b.sample(2)
    with pytest.raises(ValueError, match="same average_reservoir"):
        Reservoir(5).load_state_dict(a.state_dict())


# ------------------------------------------------------------------------------- the matrix game
def nfsp(eta: float, iters: int = 2000, batch: int = 256, lr: float = 0.02, entropy_coef: float = 0.02,
         capacity: int = 20_000, seed: int = 0) -> tuple[list[float], list[float]]:
    """NFSP on BRPS with tables; the total-variation distances from the equilibrium of the RL table's
    policy (the last iterate) and of the average table after each iteration."""
    gen = torch.Generator().manual_seed(seed)
    theta = torch.tensor([0.5, -0.3, 0.2], requires_grad=True)  # start away from the equilibrium (TV 0.43)
    phi = theta.detach().clone().requires_grad_(True)  # the average starts as the policy did
    opt, avg_opt = torch.optim.Adam([theta], lr=lr), torch.optim.Adam([phi], lr=lr)
    reservoir = Reservoir(capacity, seed=seed)
    last, average = [], []
    for _ in range(iters):
        logp_all = theta.log_softmax(0)
        pi, avg = logp_all.detach().exp(), phi.detach().softmax(0)
        mine = torch.multinomial(pi, batch, replacement=True, generator=gen)
        against_average = torch.rand(batch, generator=gen) >= eta  # the anticipatory parameter
        theirs = torch.where(against_average, torch.multinomial(avg, batch, replacement=True, generator=gen),
                             torch.multinomial(pi, batch, replacement=True, generator=gen))
        reward = BRPS[mine, theirs]
        logp = logp_all[mine][:, None]
        entropy = (-(logp_all.exp() * logp_all).sum()).expand(batch)[:, None]
        ones = torch.ones_like(logp, dtype=torch.bool)
        loss, _ = policy_loss(logp, logp.detach(), reward - reward.mean(), ones, max_generation_len=1,
                              batch_sequences=batch, batch_tokens=batch, entropy=entropy, entropy_coef=entropy_coef)
        opt.zero_grad()
        loss.backward()
        opt.step()
        reservoir.extend(mine.tolist())  # the RL policy's own moves
        moves = torch.tensor(reservoir.sample(batch))[:, None]
        supervised = masked_mean(-phi.log_softmax(0)[moves], torch.ones_like(moves, dtype=torch.bool))
        avg_opt.zero_grad()
        supervised.backward()
        avg_opt.step()
        last.append(float((theta.detach().softmax(0) - NASH).abs().sum() / 2))
        average.append(float((phi.detach().softmax(0) - NASH).abs().sum() / 2))
    return last, average


def test_the_average_policy_converges_where_the_last_iterate_does_not():
    """eta = 0.1 (the paper's): the RL table, best-responding to the average, ends far from the
    equilibrium (TV > 0.3) while the average is within 0.1 of it (tail mean; never above 0.15 in the
    tail). Plain self-play with the same entropy bonus (eta = 1: no games against the average) stays
    away too."""
    tail = 200
    last, average = nfsp(eta=0.1)
    plain, _ = nfsp(eta=1.0)
    mean = {"last": sum(last[-tail:]) / tail, "average": sum(average[-tail:]) / tail,
            "plain": sum(plain[-tail:]) / tail}
    assert mean["last"] > 0.3 and mean["plain"] > 0.15, mean
    assert mean["average"] < 0.1 and max(average[-tail:]) < 0.15, mean


# ------------------------------------------------------------------------------- the learner
def test_the_learner_trains_its_average_policy_on_the_reservoir_and_a_resume_restores_both(model_dir, tmp_path):
    settings = dict(FAST, batch_size=4, average_reservoir=6, average_batch_size=4, average_learning_rate=1e-2)
    lrn = GRPOLearner(model_dir, output_dir=str(tmp_path / "run"), **settings)
    start = adapter_state(lrn.model, mu.POLICY_ADAPTER)
    assert same(adapter_state(lrn.model, AVERAGE_ADAPTER), start)  # the average starts as the policy
    metrics = lrn.update(batch_of(1)).metrics
    assert metrics["train/reservoir_size"] == 4.0 and metrics["train/average_loss"] > 0
    policy, average = adapter_state(lrn.model, mu.POLICY_ADAPTER), adapter_state(lrn.model, AVERAGE_ADAPTER)
    assert not same(policy, start) and not same(average, start) and not same(average, policy)  # both moved
    assert lrn.update(batch_of(2)).metrics["train/reservoir_size"] == 6.0  # capacity 6 of the 8 moves
    ckpt2 = tmp_path / "run" / "ckpt-2"
    assert (ckpt2 / AVERAGE_ADAPTER / "adapter_model.safetensors").is_file()  # the average travels with it
    at_two, kept = adapter_state(lrn.model, AVERAGE_ADAPTER), list(lrn.reservoir.items)
    after = lrn.update(batch_of(3)).metrics
    resumed = GRPOLearner(model_dir, output_dir=str(tmp_path / "resumed"), initial_lora_path=str(ckpt2),
                          initial_version=2, restore_training_state=True, **settings)
    assert same(adapter_state(resumed.model, AVERAGE_ADAPTER), at_two)
    again = resumed.update(batch_of(3)).metrics  # the reservoir and the optimisers are loaded first
    assert resumed.reservoir.seen == 12 and [s.game_id for s in resumed.reservoir.items] == \
        [s.game_id for s in lrn.reservoir.items] and len(kept) == 6
    assert again["train/average_loss"] == pytest.approx(after["train/average_loss"], rel=1e-4)
    resumed_average, uninterrupted = adapter_state(resumed.model, AVERAGE_ADAPTER), adapter_state(lrn.model,
                                                                                                  AVERAGE_ADAPTER)
    assert all(torch.allclose(resumed_average[k], uninterrupted[k], atol=1e-6) for k in uninterrupted)


def test_a_resume_of_a_run_without_an_average_policy_is_refused(model_dir, tmp_path):
    lrn = GRPOLearner(model_dir, output_dir=str(tmp_path / "run"), **dict(FAST, batch_size=4))
    lrn.update(batch_of(1))
    resumed = GRPOLearner(model_dir, output_dir=str(tmp_path / "run"), initial_lora_path=str(tmp_path / "run/ckpt-1"),
                          initial_version=1, restore_training_state=True, **dict(FAST, batch_size=4,
                                                                                 average_reservoir=6))
    with pytest.raises(ValueError, match="trained without average_reservoir"):
        resumed.update(batch_of(2))


@pytest.mark.parametrize(("settings", "message"), [
    ({"average_reservoir": 0}, "average_reservoir must be an integer >= 1"),
    ({"average_batch_size": 0}, "average_batch_size must be an integer >= 1"),
    ({"average_learning_rate": 0}, r"average_learning_rate must be a finite number in \(0, 1\]"),
])
def test_average_policy_settings_are_checked(settings, message):
    with pytest.raises(ValueError, match=message):
        LearnerConfig(model_name="x", **settings)
