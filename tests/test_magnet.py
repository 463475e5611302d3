"""Magnet-regularised self-play (``beta`` with ``magnet_every``): MMD's KL pull towards a magnet that is
replaced by the current policy every N updates (Sokota et al. 2023, arXiv 2206.05825; R-NaD,
Perolat et al. 2022, arXiv 2206.15378).

The matrix-game test runs the learner's own loss (:func:`unstable.algorithms.policy_loss`, the k3 KL
estimator of ``kl_estimator="k3"``) on a softmax table in mirror self-play on biased rock-paper-scissors
(OpenSpiel's ``matrix_brps`` payoffs), where plain self-play's last iterate runs away from the
equilibrium, a magnet that never moves holds it near its start, and a moving magnet brings it to the
equilibrium. The learner tests check the magnet's schedule, checkpoint and resume on the tiny model.
"""

import pytest
import torch
from test_packed_batches import FAST, step_of

from unstable.algorithms import policy_loss
from unstable.learners import GRPOLearner, LearnerConfig
from unstable.learners import model_utils as mu
from unstable.learners.reinforce import REFERENCE_ADAPTER
from unstable.records import TrainBatch

# Biased rock-paper-scissors, the row player's payoff (OpenSpiel's matrix_brps; the MMD paper's
# "biased RPS"). Its equilibrium makes every action worth 0: A x = 0 with x on the simplex.
BRPS = torch.tensor([[0.0, -0.25, 0.5], [0.25, 0.0, -0.05], [-0.5, 0.05, 0.0]])
NASH = torch.tensor([1 / 16, 10 / 16, 5 / 16])


def test_the_biased_rps_equilibrium_is_the_one_the_test_measures_against():
    assert torch.allclose(BRPS @ NASH, torch.zeros(3), atol=1e-7)  # every action earns the value, 0
    assert torch.isclose(NASH.sum(), torch.tensor(1.0))


def self_play(beta: float, magnet_every: int | None, iters: int = 4000, batch: int = 256, lr: float = 0.02,
              seed: int = 0) -> list[float]:
    """Mirror self-play of a softmax table on BRPS: each iteration both seats sample ``batch`` actions from
    the table, the row seat's payoffs (minus their mean) are the advantages of the learner's loss, with
    the KL to the magnet at ``beta``; Adam steps the table. Returns the total-variation distance of the
    table's policy from the equilibrium after each iteration."""
    gen = torch.Generator().manual_seed(seed)
    theta = torch.tensor([0.5, -0.3, 0.2], requires_grad=True)  # start away from the equilibrium (TV 0.43)
    magnet = theta.detach().log_softmax(0)
    opt = torch.optim.Adam([theta], lr=lr)
    distances = []
    for it in range(1, iters + 1):
        logp_all = theta.log_softmax(0)
        pi = logp_all.detach().exp()
        mine = torch.multinomial(pi, batch, replacement=True, generator=gen)
        theirs = torch.multinomial(pi, batch, replacement=True, generator=gen)
        reward = BRPS[mine, theirs]
        logp = logp_all[mine][:, None]  # one "token" per completion: the action
        loss, _ = policy_loss(logp, logp.detach(), reward - reward.mean(), torch.ones_like(logp, dtype=torch.bool),
                              max_generation_len=1, batch_sequences=batch, batch_tokens=batch,
                              ref_logp=magnet[mine][:, None] if beta else None, beta=beta)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if magnet_every and it % magnet_every == 0:
            magnet = theta.detach().log_softmax(0)
        distances.append(float((theta.detach().softmax(0) - NASH).abs().sum() / 2))
    return distances


def test_a_moving_magnet_brings_self_play_to_the_equilibrium_where_plain_and_fixed_do_not():
    tail = 200
    plain = self_play(beta=0.0, magnet_every=None, iters=2000)  # both settle long before this
    fixed = self_play(beta=0.3, magnet_every=None, iters=2000)
    moving = self_play(beta=0.3, magnet_every=100)
    mean = {name: sum(d[-tail:]) / tail for name, d in (("plain", plain), ("fixed", fixed), ("moving", moving))}
    assert min(plain) < 0.15 < mean["plain"] > 0.3  # it passes near the equilibrium and leaves it
    assert mean["fixed"] > 0.3  # held near where it started: the KL pulls to the start, not to the equilibrium
    assert mean["moving"] < 0.1 and max(moving[-tail:]) < 0.15, mean


# ------------------------------------------------------------------------------- the learner
def adapter_state(model, name: str) -> dict[str, torch.Tensor]:
    """The LoRA weights of adapter ``name``, keyed without the adapter's name (so two adapters compare)."""
    return {k.replace(f".{name}.", "."): v.detach().clone() for k, v in model.named_parameters()
            if f".{name}." in k and "lora_" in k}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def batch_of(seed: int) -> TrainBatch:
    rewards = [0.3 * g - 0.4 + 0.1 * seed for g in range(4)]  # distinct within each env: GRPO advantages != 0
    return TrainBatch.from_steps([step_of(6, 4, game=g, reward=r, seed=seed) for g, r in enumerate(rewards)])


def test_the_learner_replaces_its_magnet_every_n_updates_and_a_resume_keeps_it(model_dir, tmp_path):
    settings = dict(FAST, batch_size=4, beta=0.1, magnet_every=2)
    lrn = GRPOLearner(model_dir, output_dir=str(tmp_path / "run"), **settings)
    start = adapter_state(lrn.model, mu.POLICY_ADAPTER)
    assert same(adapter_state(lrn.model, REFERENCE_ADAPTER), start)  # the first magnet is the starting policy
    assert not any(p.requires_grad for n, p in lrn.model.named_parameters() if f".{REFERENCE_ADAPTER}." in n)
    result = lrn.update(batch_of(1))
    assert not same(adapter_state(lrn.model, mu.POLICY_ADAPTER), start)  # the policy moved ...
    assert same(adapter_state(lrn.model, REFERENCE_ADAPTER), start)  # ... the magnet did not (version 1)
    assert result.metrics["train/magnet_version"] == 0.0  # the magnet this update was pulled towards
    result = lrn.update(batch_of(2))
    at_two = adapter_state(lrn.model, mu.POLICY_ADAPTER)
    assert same(adapter_state(lrn.model, REFERENCE_ADAPTER), at_two)  # version 2: the magnet is the policy
    assert result.metrics["train/magnet_version"] == 0.0
    assert lrn.update(batch_of(3)).metrics["train/magnet_version"] == 2.0
    ckpt3 = tmp_path / "run" / "ckpt-3"
    assert (ckpt3 / REFERENCE_ADAPTER / "adapter_model.safetensors").is_file()  # the magnet travels with it
    resumed = GRPOLearner(model_dir, output_dir=str(tmp_path / "run"), initial_lora_path=str(ckpt3),
                          initial_version=3, **settings)
    assert same(adapter_state(resumed.model, REFERENCE_ADAPTER), at_two)  # not version 3's policy
    assert not same(adapter_state(resumed.model, mu.POLICY_ADAPTER), at_two)
    assert resumed.update(batch_of(4)).metrics["train/magnet_version"] == 2.0
    assert same(adapter_state(resumed.model, REFERENCE_ADAPTER), adapter_state(resumed.model, mu.POLICY_ADAPTER))


def test_the_kl_of_a_magnet_run_is_taken_against_the_magnet(model_dir, tmp_path):
    """Right after a refresh the policy is its magnet: the KL to the reference is 0 at the next update's start."""
    lrn = GRPOLearner(model_dir, output_dir=str(tmp_path / "run"), **dict(FAST, batch_size=4, beta=0.1,
                                                                          magnet_every=1))
    lrn.update(batch_of(1))
    steps = batch_of(2).steps
    ref = lrn._logprobs_no_grad(steps, reference=True)
    now = lrn._logprobs_no_grad(steps)
    assert all(torch.allclose(a, b) for a, b in zip(ref, now, strict=True))


@pytest.mark.parametrize(("settings", "message"), [
    ({"magnet_every": 0, "beta": 0.1}, "magnet_every must be an integer >= 1"),
    ({"magnet_every": 5}, "with beta = 0 there is no KL penalty"),
    ({"magnet_every": 5, "beta": 0.1, "reference_adapter": "/x"}, "drop reference_adapter"),
])
def test_magnet_settings_are_checked(settings, message):
    with pytest.raises(ValueError, match=message):
        LearnerConfig(model_name="x", **settings)
