"""NFSP's average policy (Heinrich & Silver 2016, arXiv 1603.01121): a reservoir of the policy's own
moves and a second adapter trained on it by supervised learning."""

import pytest

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
