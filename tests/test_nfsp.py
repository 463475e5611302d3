"""NFSP's opponents (Heinrich & Silver 2016, arXiv 1603.01121): with ``average_eta`` an opponent seat of self-play
plays the current checkpoint's average policy (``average/``) with probability ``1 - eta``; the learner's own
seats play the policy. The sampler's share, the seat it names, how the registry counts such a game, the
in-run reading of ``average/``, and a short real run (the settings refused: tests/test_bad_input.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import unstable
from unstable.collection.scheduler import GameScheduler
from unstable.eval.exploitability import evaluate_exploitability
from unstable.eval.in_run import ExploitabilityEvaluator, ExploitabilityTarget, SubmitCheckpoint
from unstable.inference.adapters import read_adapter
from unstable.inference.base import SamplingParams
from unstable.records import AVERAGE_ADAPTER, AgentSpec, GameRecord, GameSpec, PolicyRef, average_policy_ref
from unstable.registry import ModelRegistry
from unstable.samplers.config import SamplerConfig
from unstable.samplers.env_samplers import UniformRandomEnvSampler
from unstable.samplers.model_samplers import BaseModelSampler
from unstable.samplers.nfsp import NFSPModelSampler
from unstable.samplers.strategies import opponent_sampler

KUHN = "KuhnPoker-v0-train"
NFSP_KEY = f"eval/{KUHN}/exploitability_nfsp_average"


def registry_at(version: int = 3, path: str = "/run/checkpoints/ckpt-3") -> ModelRegistry:
    registry = ModelRegistry()
    registry.add_checkpoint("base", None, 0)
    registry.add_checkpoint(f"ckpt-{version}", path, version)
    return registry


# ----------------------------------------------------------------------------- the sampler
def test_the_average_plays_a_share_one_minus_eta_of_the_opponent_seats():
    """Known answer: over 4,000 seeded draws the share of average opponents is 1 - eta within 3 standard
    errors; the seat is the current checkpoint's average/ adapter, at its version, never the policy's uid."""
    registry, n = registry_at(), 4000
    for eta in (0.1, 0.5):
        sampler = NFSPModelSampler(BaseModelSampler(registry), eta, rng_seed=1)
        drawn = [sampler.sample_opponent() for _ in range(n)]
        average = [ref for ref in drawn if ref.average_of is not None]
        share, se = len(average) / n, ((1 - eta) * eta / n) ** 0.5
        assert abs(share - (1 - eta)) < 3 * se, (eta, share)
        assert set(drawn) == {average[0], registry.policy_ref()}
    assert average[0] == PolicyRef(uid="ckpt-3/average", kind="checkpoint",
                                   adapter_path=f"/run/checkpoints/ckpt-3/{AVERAGE_ADAPTER}", version=3,
                                   lineage="model", average_of="ckpt-3")
    always = NFSPModelSampler(BaseModelSampler(registry), 0.0)
    never = NFSPModelSampler(BaseModelSampler(registry), 1)
    assert {always.sample_opponent().uid for _ in range(50)} == {"ckpt-3/average"}
    assert {never.sample_opponent().uid for _ in range(50)} == {"ckpt-3"}


def test_the_base_models_average_is_the_base_model_and_only_checkpoints_have_one():
    base = ModelRegistry()
    base.add_checkpoint("base", None, 0)
    ref = NFSPModelSampler(BaseModelSampler(base), 0.0).sample_opponent()
    assert (ref.uid, ref.adapter_path, ref.version, ref.average_of) == ("base/average", None, 0, "base")
    for other in (PolicyRef("random", "scripted"), ref):
        with pytest.raises(ValueError, match="only a learner checkpoint has an average policy"):
            average_policy_ref(other)
    for eta in (-0.1, 1.5, True, "0.1"):
        with pytest.raises(ValueError, match=r"eta must be a number in \[0, 1\]"):
            NFSPModelSampler(BaseModelSampler(base), eta)


def test_the_scheduler_seats_the_policy_for_the_learner_and_the_average_against_it():
    """One collected seat plays ckpt-3 (trained on), the other ckpt-3/average (not collected); the draws continue
    over a resume (the sampler's rng is saved with the scheduler's state)."""
    registry = registry_at()
    specs = [unstable.TrainEnvSpec(env_id=KUHN, num_players=2, num_actors=1, prompt_template="qwen3-board")]

    def scheduler() -> GameScheduler:
        settings = SamplerConfig(opponent_sampling_strategy="mirror", average_eta=0.5)
        return GameScheduler(opponent_sampler(settings, registry, 7),
                             UniformRandomEnvSampler(specs, rng_seed=7), seed=7)

    first = scheduler()
    jobs = first.next_train_jobs(20)
    for job in jobs:
        mine = [a for a in job.agents if a.collect_data]
        theirs = [a for a in job.agents if not a.collect_data]
        assert [a.policy.uid for a in mine] == ["ckpt-3"] and len(theirs) == 1
    opponents = [a.policy.uid for job in jobs for a in job.agents if not a.collect_data]
    assert set(opponents) == {"ckpt-3", "ckpt-3/average"}
    resumed = scheduler()
    resumed.load_state_dict(first.state_dict())
    after = [a.policy.uid for job in first.next_train_jobs(10) for a in job.agents]
    assert [a.policy.uid for job in resumed.next_train_jobs(10) for a in job.agents] == after


def test_the_eval_games_of_an_nfsp_lineage_seat_its_average_policy():
    """NFSP evaluates its average: with ``eval_average=(None,)`` every eval game's evaluated seat (alternating) is
    ckpt-3/average and the other the fixed opponent; without it, ckpt-3; train seats are unchanged."""
    registry = registry_at()
    registry.add_fixed("random")
    game = {"env_id": KUHN, "num_players": 2, "prompt_template": "qwen3-board"}
    specs = [unstable.TrainEnvSpec(num_actors=2, **game)]
    evals = [unstable.EvalEnvSpec(fixed_opponent="random", **game)]
    for eval_average, uid in (((None,), "ckpt-3/average"), ((), "ckpt-3")):
        scheduler = GameScheduler(BaseModelSampler(registry), UniformRandomEnvSampler(specs, evals, rng_seed=7),
                                  seed=7, eval_average=eval_average)
        jobs = scheduler.next_eval_jobs(4)
        assert [job.eval_player_id for job in jobs] == [0, 1, 0, 1]
        for job in jobs:
            seats = {a.player_id: a.policy.uid for a in job.agents}
            assert seats == {job.eval_player_id: uid, 1 - job.eval_player_id: "random"}, (eval_average, seats)
        assert {a.policy.uid for a in scheduler.next_train_job().agents} == {"ckpt-3"}


def test_a_game_against_the_average_is_the_checkpoints_unrated_self_play():
    registry = registry_at()
    spec = GameSpec(game_id=0, env_id=KUHN, seed=0, agents=(
        AgentSpec(0, registry.policy_ref(), collect_data=True),
        AgentSpec(1, average_policy_ref(registry.policy_ref()))))
    before = registry.ratings()
    registry.record_game(GameRecord(spec=spec, turns=(), final_rewards={0: 1.0, 1: -1.0}, game_info={}))
    entry = registry.get_model("ckpt-3")
    assert (entry["games"], entry["self_games"], entry["wins"], entry["losses"]) == (1, 1, 0, 0)
    assert registry.ratings() == before and registry.fixed_uids() == []
    assert registry.match_counts() == {"ckpt-3": {"ckpt-3": 1}}


# ----------------------------------------------------------------------------- the in-run reading
def test_the_evaluator_reads_the_checkpoints_average_adapter_as_offline(tiny_model_dir, adapters, tmp_path):
    """A checkpoint whose average/ is another adapter: ``exploitability_nfsp_average`` is the offline reading
    of average/, ``exploitability`` still the policy's; the learner hook sends both adapters' files. The
    base model's average is the base model."""
    ckpt = tmp_path / "ckpt-2"
    shutil.copytree(adapters[0], ckpt)
    shutil.copytree(adapters[1], ckpt / AVERAGE_ADAPTER)
    sent = []

    class Hooked:
        def submit(self, *args):
            sent.append(args)

    SubmitCheckpoint(Hooked(), str(tmp_path), nfsp_average=True)(2)
    (version, path, policy, average), = sent
    assert (version, path) == (2, str(ckpt)) and average.files == read_adapter(adapters[1]).files
    sampling = SamplingParams(temperature=1.0, max_new_tokens=16)
    evaluator = ExploitabilityEvaluator(tiny_model_dir, [ExploitabilityTarget(KUHN, "qwen3-board")], sampling,
                                        nfsp_average=True)
    base = evaluator.evaluate(0)
    assert base[NFSP_KEY] == base[f"eval/{KUHN}/exploitability"]
    got = evaluator.evaluate(version, path, policy, average)
    offline = evaluate_exploitability(tiny_model_dir, KUHN, adapters[1], temperature=1.0, top_p=1.0,
                                      max_new_tokens=16, backend=evaluator.backend)
    assert got[NFSP_KEY] == pytest.approx(offline.exploitability, abs=1e-6)
    assert got[f"{NFSP_KEY}_other_mass"] == pytest.approx(offline.other_mean, abs=1e-6)
    # the policy's reading is its own adapter's (the tiny model's mass is mostly off the legal answers, so the
    # exploitability of both may be 1: the other mass tells the two adapters apart)
    assert got[f"eval/{KUHN}/exploitability_other_mass"] != got[f"{NFSP_KEY}_other_mass"]
    assert evaluator.finish(timeout=60) == {"evaluated": [0, 2], "skipped": []}


# ----------------------------------------------------------------------------- a run
@pytest.mark.slow
def test_a_run_seats_the_average_policy_and_logs_its_exploitability(tiny_model_dir, tmp_path, ray_session):
    """Two updates of Kuhn poker self-play with ``average_eta=0``: every opponent seat is the current checkpoint's
    average policy (the transcripts and ``collect/average_policy_games``), never collected; so is every eval
    game's evaluated seat (``eval/average_policy_games``); the in-run
    evaluator logs ``exploitability_nfsp_average`` at each checkpoint it reads; ``unstable eval --run --checkpoint
    ckpt-2/average`` finds the adapter."""
    from conftest import small_run_kwargs

    from unstable.cli.commands import run_checkpoint
    from unstable.run.resume import REGISTRY_FILE
    from unstable.tracking import read_metrics

    game = {"env_id": KUHN, "num_players": 2, "prompt_template": "qwen3-board"}
    kwargs = small_run_kwargs(tiny_model_dir, tmp_path, run_name="nfsp", temperature=1.0, batch_size=8,
                              mini_batch_size=4, learner={"average_reservoir": 64, "average_batch_size": 8},
                              average_eta=0.0,
                              train_envs=[unstable.TrainEnvSpec(num_actors=1, **game)],
                              eval_envs=[unstable.EvalEnvSpec(fixed_opponent="random", **game)])
    with unstable.build(**kwargs) as run:
        summary = run.start(learning_steps=2, num_collection_workers=4, num_eval_workers=1)
    run_dir = Path(summary["run_dir"])
    lines = [json.loads(x) for x in (run_dir / "games" / "transcripts.jsonl").read_text().splitlines()]
    train = [line for line in lines if line["kind"] == "game" and not line["is_eval"]]
    seats = [seat for line in train for seat in line["seats"]]
    assert train and all(sum(not s["collect_data"] for s in line["seats"]) == 1 for line in train)
    assert all(s["uid"].endswith("/average") for s in seats if not s["collect_data"])
    assert not any(s["uid"].endswith("/average") for s in seats if s["collect_data"])
    later = [s for s in seats if s["uid"] in ("ckpt-1/average", "ckpt-2/average")]
    for seat in later:
        assert seat["adapter_path"] == str(run_dir / "checkpoints" / seat["uid"])
    rows = read_metrics(run_dir)
    counted = max(r.get("collect/average_policy_games", 0) for r in rows)
    assert counted == len(train)
    evals = [line for line in lines if line["kind"] == "game" and line["is_eval"]]  # NFSP evaluates the average
    assert evals and all(line["seats"][line["eval_player_id"]]["uid"].endswith("/average") for line in evals)
    assert max(r.get("eval/average_policy_games", 0) for r in rows) == len(evals)
    nfsp = {r["learner_step"]: r for r in rows if NFSP_KEY in r}
    assert set(nfsp) == set(summary["exploitability"]["evaluated"]) and 0 <= nfsp[max(nfsp)][NFSP_KEY] <= 1
    assert run_checkpoint(str(run_dir), "ckpt-2/average")[1] == str(run_dir / "checkpoints" / "ckpt-2" / "average")
    registry = json.loads((run_dir / REGISTRY_FILE).read_text())  # the averages are not registered
    assert {m["uid"] for m in registry["models"]} == {"base", "ckpt-1", "ckpt-2", "random"}


def test_the_quickstart_evaluates_the_nfsp_average_beside_the_final_checkpoint(tiny_model_dir, adapters, tmp_path,
                                                                               monkeypatch):
    """With ``average_reservoir`` the job's last step also evaluates the final checkpoint's ``average/`` (greedy
    games against the same opponent) and says so; ``summary.json`` has it as ``eval.final_average``. The warm
    start and the training are stood in for (tests/test_quickstart.py runs them); the evaluations are real."""
    import unstable.cli.quickstart as qs
    import unstable.models.warmstart as warmstart

    ckpt = tmp_path / "ckpt-2"
    shutil.copytree(adapters[0], ckpt)
    shutil.copytree(adapters[1], ckpt / AVERAGE_ADAPTER)
    monkeypatch.setattr(warmstart, "warm_start_path", lambda base, cfg, progress: (tiny_model_dir, True))
    monkeypatch.setattr(qs, "_train", lambda model, cfg, run_dir, say: (str(ckpt), 2))
    evaluated, real_eval = [], qs._eval

    def evaluate(model, adapter, *args):
        evaluated.append(adapter)
        return real_eval(model, adapter, *args)

    monkeypatch.setattr(qs, "_eval", evaluate)
    said = []
    cfg = qs.QuickstartConfig(out=str(tmp_path / "qs"), eval_games=4, eval_workers=1, learning_steps=2,
                              learner={"average_reservoir": 64})
    summary = qs.run_quickstart(cfg, say=said.append)
    assert evaluated == [None, str(ckpt), str(ckpt / AVERAGE_ADAPTER)]
    average = summary["eval"]["final_average"]
    assert average["adapter"] == str(ckpt / AVERAGE_ADAPTER) and average["games"] == 4
    assert json.loads((tmp_path / "qs" / "summary.json").read_text())["eval"]["final_average"] == average
    assert any(line.startswith("  its NFSP average ") for line in said)
