"""Data-parallel make_private (issue 29 item 2): two gloo processes on the CPU run the plan a
single process runs (the same model to 1e-6, one noise draw per step, the same report), a
checkpoint written by two ranks resumes in one, and what cannot be one plan is refused.

The two ranks are this file run as a script (``python test_distributed.py RANK PORT OUT``),
spawned once per module; the single-process references run in the test process.
"""

import copy
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from privopt.noise import BLTMechanism  # noqa: E402
from privopt.torch import PrivateTrainer, make_private  # noqa: E402
from privopt.training import QuantileClipping  # noqa: E402
from torch import nn  # noqa: E402

GEN = torch.Generator().manual_seed(0)
X = torch.randn(90, 4, generator=GEN)
Y = (X[:, 0] > 0).long()
BLT = BLTMechanism([0.9, 0.4], [0.3, 0.2])
CASES = {  # name: make_private keywords (the loop's loss is the mean, as written usually)
    "dpsgd": {"mechanism": "dpsgd", "batch_size": 16, "accountant": "rdp"},
    "blt": {"mechanism": BLT, "batch_size": 15, "max_physical_batch_size": 4},
    "adaptive": {  # the exact unclipped count is all-reduced before its noisy release
        "mechanism": "dpsgd", "batch_size": 16, "accountant": "rdp", "diagnostics": True,
        "adaptive_clipping": QuantileClipping(count_noise_fraction=0.2),
    },
    "empty": {"mechanism": BLT, "batch_size": 1, "data": (X[:6], Y[:6])},  # rank 1: none
    # user level: 25 users of 3 or 4 interleaved records; a rank's share is whole users, and
    # a user larger than the physical batch is accumulated over its own chunks
    "users": {"mechanism": BLT, "batch_size": 5, "max_physical_batch_size": 4,
              "users": torch.arange(90) % 25},
}  # fmt: skip
RESUME_AT = 4  # the two-rank run saves after this many steps


def _model(seed=3):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    return model, torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)


def _run(case, *, init=3, seed=5, **extra):
    model, opt = _model(init)
    kwargs = {**CASES[case], **extra}
    data = kwargs.pop("data", (X, Y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_private(model, opt, data, epsilon=2.0, delta=0.1 / len(data[0]), epochs=2,
                            clip_norm=0.5, seed=seed, **kwargs)  # fmt: skip


def _train(run, steps=None):
    """The ordinary loop (mean loss) to the end of the plan, or until ``steps`` logical steps
    (a chunked batch takes several loader items) have run."""
    while not run.done:
        for x, y in run.loader:
            run.optimizer.zero_grad()
            F.cross_entropy(run.model(x), y).backward()
            run.optimizer.step()
            if run.step_count == steps:
                return run
    return run


def _params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _count_draws(run):
    """Wrap the run's noise stream so that its draws are counted."""
    stream, counter = run._stream, {"draws": 0}
    draw = stream.next

    def counted():
        counter["draws"] += 1
        return draw()

    stream.next = counted
    return counter


def _plant_double_noise(run):
    """The bug this design avoids: every rank adds the step's noise to its own share before
    the all-reduce (so the sum carries it W times), and once more after."""
    shadow, reduce = copy.deepcopy(run._stream), run._reduce
    offsets = [p.numel() for _, p in run._params]

    def planted(sums):
        z = shadow.next().split(offsets)
        noisy = {k: v + zi.view(v.shape) for (k, v), zi in zip(sums.items(), z, strict=True)}
        return reduce(noisy)

    run._reduce = planted


def _trainer():
    """A PrivateTrainer (its own loop, sum loss) with the diagnostic mean loss of each step."""
    model, opt = _model(3)
    losses = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = PrivateTrainer(model, opt, (X, Y), epsilon=2.0, delta=1e-4, epochs=2,
                                 clip_norm=0.5, seed=5, diagnostics=True,
                                 callback=lambda info: losses.append(info.loss),
                                 **CASES["dpsgd"])  # fmt: skip
        trainer.fit()
    return trainer, losses


def _worker(rank: int, port: int, out: Path) -> None:
    """One rank of the two-process run: every case, then the refusals (as a script)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    results = {}
    for case in CASES:  # rank 1's model starts elsewhere: rank 0's parameters are broadcast
        run = _run(case, init=3 + rank)
        counter = _count_draws(run)
        _train(run)
        results[case] = {
            "params": _params(run.model),
            "epsilon": run.report().epsilon,
            "draws": counter["draws"],
            "steps": run.step_count,
            "clips": run.clip_history,
        }
        planted = _run(case, init=3 + rank)
        _plant_double_noise(planted)
        results[case]["planted"] = _params(_train(planted).model)
    run = _run("blt")  # saved mid-run by rank 0 (every rank calls save)
    _train(run, RESUME_AT)
    run.save(out / "checkpoint.pt")
    dist.barrier()
    results["saved"] = (out / "checkpoint.pt").exists()
    results["unseeded"] = _params(_train(_run("dpsgd", seed=None)).model)
    trainer, losses = _trainer()
    results["trainer"] = (_params(trainer.model), losses)
    try:
        _run("dpsgd", seed=5 + rank)
    except ValueError as error:
        results["mismatch"] = str(error)
    try:  # each rank its own shard (the DistributedSampler habit), of the same size
        _run("dpsgd", data=(X[45 * rank :][:45], Y[45 * rank :][:45]))
    except ValueError as error:
        results["shard"] = str(error)
    torch.save(results, out / f"rank{rank}.pt")
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, str(rank), str(port), str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    logs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(logs)[-4000:]
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]
    return ranks, out


def _close(a, b, tol=1e-6):
    return all(torch.allclose(a[k], b[k], rtol=0, atol=tol) for k in a)


def _gap(a, b):
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_two_ranks_train_the_single_process_model_with_one_noise_draw(two_ranks, case):
    ranks, _ = two_ranks
    single = _run(case)
    counter = _count_draws(single)
    _train(single)
    expected = _params(single.model)
    for r in ranks:
        assert r[case]["steps"] == single.steps and r[case]["draws"] == single.steps
        assert _gap(r[case]["params"], expected) < 1e-6
        assert r[case]["epsilon"] == single.report().epsilon <= 2.0
    assert counter["draws"] == single.steps
    if single.clip_history is not None:  # the same clips from the same (all-reduced) counts
        for r in ranks:
            clips, counts = r[case]["clips"]
            assert np.allclose(clips, single.clip_history[0], rtol=0, atol=1e-12)
            assert np.allclose(counts, single.clip_history[1], rtol=0, atol=1e-12)
    # the planted double noise moves the model far from the single process's: the
    # comparison above would catch noise added on every rank
    assert _gap(ranks[0][case]["planted"], expected) > 1e-2


@pytest.mark.slow
def test_a_checkpoint_of_two_ranks_resumes_in_one_process(two_ranks):
    ranks, out = two_ranks
    assert ranks[0]["saved"] and ranks[1]["saved"]
    resumed = _run("blt", init=11)  # another start: the checkpoint holds the model
    resumed.load(out / "checkpoint.pt")
    assert resumed.step_count == RESUME_AT
    _train(resumed)
    straight = _train(_run("blt"))
    assert _gap(_params(resumed.model), _params(straight.model)) < 1e-6
    assert _gap(_params(resumed.model), ranks[0]["blt"]["params"]) < 1e-6


@pytest.mark.slow
def test_ranks_agree_without_a_seed_and_the_trainer_runs_data_parallel(two_ranks):
    ranks, _ = two_ranks
    assert _gap(ranks[0]["unseeded"], ranks[1]["unseeded"]) == 0.0  # rank 0's root, broadcast
    trainer, losses = _trainer()
    for r in ranks:  # the same model; the diagnostic loss is the whole batch's mean
        assert _gap(r["trainer"][0], _params(trainer.model)) < 1e-6
        assert np.allclose(r["trainer"][1], losses, rtol=1e-6, atol=0)


@pytest.mark.slow
def test_mismatched_seeds_or_data_across_ranks_are_refused_on_every_rank(two_ranks):
    ranks, _ = two_ranks
    for r in ranks:
        assert "different seed on ranks [1] than on rank 0" in r["mismatch"]
        assert "different data on ranks [1]" in r["shard"] and "not a shard" in r["shard"]


# -- fast siblings (one process) --------------------------------------------------------------
@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("case", list(CASES))
def test_a_one_rank_group_with_distributed_true_is_the_plain_run(one_rank_group, case):
    run = _run(case, distributed=True)
    assert run._dist is not None and run._dist.world == 1
    _train(run)
    dist_free = _run(case, distributed=False)
    assert dist_free._dist is None
    _train(dist_free)
    assert _gap(_params(run.model), _params(dist_free.model)) == 0.0


def test_a_ddp_wrapped_model_is_refused(one_rank_group):
    model, _ = _model()
    wrapped = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=r"DistributedDataParallel model.*model\.module"):
        make_private(wrapped, opt, (X, Y), epsilon=2.0, delta=1e-4, epochs=1, batch_size=10,
                     clip_norm=1.0, mechanism="dpsgd")  # fmt: skip


def test_data_parallel_without_a_process_group_is_refused(monkeypatch):
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match=r"distributed=True.*not initialised"):
        _run("dpsgd", distributed=True)
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it
    with pytest.raises(ValueError, match=r"WORLD_SIZE=2.*init_process_group"):
        _run("dpsgd")
    assert _run("dpsgd", distributed=False)._dist is None
    with pytest.raises(ValueError, match="Expected distributed"):
        _run("dpsgd", distributed="yes")


def test_shares_partition_every_batch_contiguously(one_rank_group):
    from privopt.torch.distributed import DataParallel

    part = DataParallel(torch.device("cpu"))
    for world, n in [(2, 15), (3, 7), (4, 2), (2, 0)]:
        part.world = world
        shares = []
        for rank in range(world):
            part.rank = rank
            shares.append(part.share(list(range(n))))
        assert [i for s in shares for i in s] == list(range(n))
        assert max(map(len, shares)) - min(map(len, shares)) <= 1


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
