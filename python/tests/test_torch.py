import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import sluice  # noqa: E402
import sluice.torch as st  # noqa: E402
from conftest import DIM, N  # noqa: E402


def features(batch):
    x = batch["x"].view(torch.float32).reshape(-1, DIM)
    return x, batch["label"]


def features_dict(batch):
    x, y = features(batch)
    return {"x": x, "label": y}


def test_tensors_and_offsets(cluster):
    ds = st.IterableDataset("points", batch_size=10, shuffle=False)
    batch = next(iter(ds))
    assert batch["x"].dtype == torch.uint8 and batch["x_offsets"].tolist() == list(range(0, 11 * 64, 64))
    assert batch["id"].tolist() == list(range(10))


def double_id(batch):
    """A transform: runs in the workers."""
    batch["id2"] = batch["id"] * 2
    batch["pid"] = torch.full((len(batch["id"]),), __import__("os").getpid())
    return batch


def epoch_and_resume(num_workers, transform=None, context="forkserver"):
    """Iterates an epoch, checkpointing after step 41, and resumes a new
    loader from the checkpoint: both sample orders."""
    ds = st.IterableDataset("points", batch_size=50, shuffle=True, seed=5, transform=transform)
    loader = st.DataLoader(ds, num_workers=num_workers, multiprocessing_context=context)
    ids, pids = [], set()
    for i, batch in enumerate(loader):
        ids += batch["id"].tolist()
        if transform is not None:
            assert batch["id2"].tolist() == [2 * j for j in batch["id"].tolist()]
            pids |= set(batch["pid"].tolist())
        if i == 40:
            state = loader.state_dict()
            cut = len(ids)
    assert sorted(ids) == list(range(N))
    assert state["consumed"] == 41 * 50
    ds2 = st.IterableDataset("points", batch_size=50, shuffle=True, seed=5, transform=transform)
    loader2 = st.DataLoader(ds2, num_workers=num_workers, multiprocessing_context=context)
    loader2.load_state_dict(state)
    rest = [i for b in loader2 for i in b["id"].tolist()]
    assert ids[:cut] + rest == ids
    return pids


def test_without_transform_reads_in_process_and_resumes(cluster):
    assert epoch_and_resume(2) == set()
    ds = st.IterableDataset("points", batch_size=50)
    assert st.DataLoader(ds, num_workers=2)._dl.num_workers == 0  # no process for plain reads


@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_transform_runs_in_workers_and_resumes(cluster, context):
    pids = epoch_and_resume(2, double_id, context)
    assert len(pids) == 2 and __import__("os").getpid() not in pids


def test_fork_workers_are_refused(cluster):
    ds = st.IterableDataset("points", batch_size=50, transform=double_id)
    with pytest.raises(ValueError, match="forkserver or spawn"):
        st.DataLoader(ds, num_workers=2, multiprocessing_context="fork")


def test_workers_persist_across_epochs_and_follow_set_epoch(cluster):
    ds = st.IterableDataset("points", batch_size=100, shuffle=True, seed=4, transform=double_id)
    loader = st.DataLoader(ds, num_workers=2, timeout=60)
    orders, pids = [], []
    for epoch in (0, 1, 0):
        ds.set_epoch(epoch)
        ids, seen = [], set()
        for b in loader:
            ids += b["id"].tolist()
            seen |= set(b["pid"].tolist())
        assert sorted(ids) == list(range(N))
        orders.append(ids)
        pids.append(seen)
    assert orders[0] != orders[1] and orders[0] == orders[2]
    assert len(pids[0]) == 2 and pids[0] == pids[1] == pids[2]  # the same two workers throughout


def test_worker_that_exits_before_its_batch_is_read(cluster):
    # Worker 1 has one step: it can send it and exit while the training
    # process is still busy with worker 0's first batch. Its memory must
    # still reach the training process.
    import time

    ds = st.IterableDataset("points", batch_size=2000, transform=keep_x)
    ids = []
    for batch in st.DataLoader(ds, num_workers=2, timeout=60):
        time.sleep(1)
        ids += batch["id"].tolist()
    assert sorted(ids) == list(range(N))


def test_iterating_again_repeats_the_epoch_and_state_follows(cluster):
    ds = st.IterableDataset("points", batch_size=100, shuffle=True, seed=2)
    loader = st.DataLoader(ds)
    first = [b["id"].tolist() for b in loader]
    assert loader.state_dict()["consumed"] == N
    it = iter(loader)
    next(it)
    next(it)
    assert loader.state_dict()["consumed"] == 200
    again = [b["id"].tolist() for b in st.DataLoader(ds)]
    assert again == first
    ds.set_epoch(1)
    assert [b["id"].tolist() for b in loader] != first


RANK_SCRIPT = """
import json, os, sys
import torch.distributed as dist
import sluice.torch as st
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)
ds = st.IterableDataset("points", batch_size=40, shuffle=True, seed=9)
ids = [i for b in st.DataLoader(ds) for i in b["id"].tolist()]
json.dump({"options": [ds.options["rank"], ds.options["world_size"]], "ids": ids}, open(sys.argv[3], "w"))
dist.destroy_process_group()
"""


def test_rank_and_world_size_come_from_torch_distributed(cluster, tmp_path, python):
    import json
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(__file__), ".."))
    procs = [subprocess.Popen([python, "-c", RANK_SCRIPT, str(r), str(tmp_path / "rdv"), str(tmp_path / ("%d.json" % r))],
                              env=env) for r in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    got = [json.load(open(tmp_path / ("%d.json" % r))) for r in range(2)]
    assert [g["options"] for g in got] == [[0, 2], [1, 2]]
    a, b = set(got[0]["ids"]), set(got[1]["ids"])
    assert not a & b and a | b == set(range(N)) and len(got[0]["ids"]) == len(got[1]["ids"]) == N // 2


def test_model_trains_with_transform_workers(cluster):
    torch.manual_seed(0)
    model = torch.nn.Linear(DIM, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ds = st.IterableDataset("points", batch_size=16, shuffle=True, seed=0, columns=["x", "label"], transform=features_dict)
    losses = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        for batch in st.DataLoader(ds, num_workers=2):
            x, y = batch["x"], batch["label"]
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert len(losses) == 2 * N // 16
    first, last = np.mean(losses[:30]), np.mean(losses[-30:])
    assert last < 0.5 * first, "loss went from %.3f to %.3f" % (first, last)


def test_tensor_columns(cluster, tmp_path):
    import subprocess

    import pyarrow as pa
    import pyarrow.parquet as pq
    from conftest import SLUICE

    n, dim = 300, 8
    emb = np.arange(n * dim, dtype=np.float32).reshape(n, dim) / 4
    digest = [bytes((i * 7 + k) % 256 for k in range(4)) for i in range(n)]
    tokens = [list(range(i * 10, i * 10 + i % 4)) for i in range(n)]
    table = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), dim),
        "digest": pa.array(digest, pa.binary(4)),
        "tokens": pa.array(tokens, pa.large_list(pa.int32())),
    })
    src = str(tmp_path / "tensors.parquet")
    pq.write_table(table, src, row_group_size=100)
    subprocess.run([SLUICE, "dataset", "import", "-q", "--format", "parquet", src, "tensors"], check=True,
                   stdout=subprocess.DEVNULL)
    ds = st.IterableDataset("tensors", batch_size=32, shuffle=True, seed=1)
    seen = 0
    for batch in ds:
        ids = batch["id"].numpy()
        x = batch["emb"]
        assert x.dtype == torch.float32 and tuple(x.shape) == (len(ids), dim)
        assert np.array_equal(x.numpy(), emb[ids])
        assert batch["digest"].shape == (len(ids), 4)
        assert [bytes(r) for r in batch["digest"].numpy()] == [digest[i] for i in ids]
        vals, offs = batch["tokens"].numpy(), batch["tokens_offsets"].numpy()
        assert [vals[offs[j]:offs[j + 1]].tolist() for j in range(len(ids))] == [tokens[i] for i in ids]
        seen += len(ids)
    assert seen == n


def test_fixed_size_list_is_not_copied():
    import pyarrow as pa

    col = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(40, dtype=np.float32)), 4).slice(2, 5)
    t = st.to_tensors(pa.record_batch([col], names=["v"]))["v"]
    assert tuple(t.shape) == (5, 4) and t[0, 0].item() == 8
    assert t.data_ptr() == col.values.buffers()[1].address + 8 * 4


def memfd_ranges(name="sluice-buffer"):
    """The address ranges of this process's mappings of loader memfds."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            if "memfd:" + name in line:
                lo, hi = line.split()[0].split("-")
                out.append((int(lo, 16), int(hi, 16)))
    return out


def keep_x(batch):
    return {"x": batch["x"], "id": batch["id"], "id_plus": batch["id"] + 1}


def test_worker_batches_reach_the_training_process_without_a_copy(cluster):
    # Each worker's budget holds three batches (prefetch_bytes=1 is raised
    # to that), so the epoch finishes only if the training process hands
    # every batch's memory back as its tensors go.
    ds = st.IterableDataset("points", batch_size=20, shuffle=True, seed=3, transform=keep_x, prefetch_bytes=1)
    ids = []
    for batch in st.DataLoader(ds, num_workers=2, timeout=60):
        ranges = memfd_ranges()
        for name in ("x", "id"):  # views of the worker's batch memory, mapped here
            p = batch[name].data_ptr()
            assert any(lo <= p < hi for lo, hi in ranges), "%s was copied" % name
        p = batch["id_plus"].data_ptr()  # made by the transform: torch's usual way
        assert not any(lo <= p < hi for lo, hi in ranges)
        assert batch["id_plus"].tolist() == [i + 1 for i in batch["id"].tolist()]
        xs = batch["x"].view(torch.float32).reshape(-1, DIM).numpy()
        for j, i in enumerate(batch["id"].tolist()):
            assert np.array_equal(xs[j], __import__("conftest").sample(i)[0])
        ids += batch["id"].tolist()
    assert sorted(ids) == list(range(N))


def test_workers_read_through_the_agent_without_a_copy(cluster):
    ds = st.IterableDataset("points", batch_size=40, shuffle=True, seed=6, transform=keep_x,
                            agent=cluster["SLUICE_AGENT"])
    ids = []
    for batch in st.DataLoader(ds, num_workers=2, timeout=60):
        p = batch["x"].data_ptr()
        assert any(lo <= p < hi for lo, hi in memfd_ranges("sluice-iov")), "x is not in a worker's Iov"
        ids += batch["id"].tolist()
    assert sorted(ids) == list(range(N))


def test_zero_copy_off_copies(cluster):
    ds = st.IterableDataset("points", batch_size=500, transform=keep_x)
    n = 0
    for batch in st.DataLoader(ds, num_workers=2, zero_copy=False, timeout=60):
        p = batch["x"].data_ptr()
        assert not any(lo <= p < hi for lo, hi in memfd_ranges())
        n += len(batch["id"])
    assert n == N


def fail_on_step_3(batch):
    if 300 <= int(batch["id"][0]) < 400:
        raise ValueError("bad sample in this batch")
    return batch


def with_worker_info(batch):
    info = torch.utils.data.get_worker_info()
    batch["worker"] = torch.full((len(batch["id"]),), info.id)
    batch["rand"] = torch.rand(1).expand(len(batch["id"])).clone()
    batch["threads"] = torch.tensor([torch.get_num_threads(), sluice._lib.call("sluice_procs", 0)])
    return batch


def test_workers_without_torch_machinery(cluster):
    # Plain options: the workers are sluice.torch's own, not torch's.
    ds = st.IterableDataset("points", batch_size=100, shuffle=False, transform=with_worker_info)
    loader = st.DataLoader(ds, num_workers=2)
    assert loader._dl is None and loader._pool is not None
    batches = list(loader)
    assert [int(b["id"][0]) for b in batches] == list(range(0, N, 100))  # step order
    assert [int(b["worker"][0]) for b in batches] == [i % 2 for i in range(len(batches))]
    assert float(batches[0]["rand"][0]) != float(batches[1]["rand"][0])  # each worker seeded apart
    # Each worker computes on one thread, torch's and libsluice's Go code
    # alike (GOMAXPROCS, when set, is the user's choice for the latter).
    go = int(os.environ.get("GOMAXPROCS") or 1)
    assert {tuple(b["threads"].tolist()) for b in batches} == {(1, go)}
    assert st.DataLoader(ds, num_workers=2, pin_memory=False)._pool is None  # torch's options: torch's loader


def test_worker_error_is_raised_with_its_type_and_traceback(cluster):
    ds = st.IterableDataset("points", batch_size=100, shuffle=False, transform=fail_on_step_3)
    loader = st.DataLoader(ds, num_workers=2)
    with pytest.raises(ValueError, match="(?s)worker 1.*bad sample in this batch"):
        for _ in loader:
            pass
    # The workers live on: the next iteration is whole up to the bad step.
    ids = []
    with pytest.raises(ValueError):
        for b in loader:
            ids += b["id"].tolist()
    assert ids == list(range(300))


def test_leaving_an_iteration_early_and_starting_again(cluster):
    # The smallest budget: the batches dropped here must be back with their
    # worker when its next iteration starts, or the loader's hard limit
    # stops it (they are: the worker takes the releases queued at start).
    ds = st.IterableDataset("points", batch_size=100, shuffle=True, seed=8, transform=keep_x, prefetch_bytes=1)
    loader = st.DataLoader(ds, num_workers=2)
    full = [b["id"].tolist() for b in loader]
    for cut in (1, 5):
        it = iter(loader)
        part = [next(it)["id"].tolist() for _ in range(cut)]
        assert part == full[:cut]
        # Not closed: the next iteration takes the workers back from it.
        assert [b["id"].tolist() for b in loader] == full
    assert len(loader._pool.procs) == 2


def test_worker_that_dies_is_reported(cluster):
    import os
    import signal

    ds = st.IterableDataset("points", batch_size=50, transform=keep_x)
    loader = st.DataLoader(ds, num_workers=2)
    it = iter(loader)
    next(it)
    os.kill(loader._pool.procs[1].pid, signal.SIGKILL)
    with pytest.raises(sluice_error(), match="exited unexpectedly"):
        for _ in it:
            pass
    assert sorted(i for b in loader for i in b["id"].tolist()) == list(range(N))  # new workers


def test_workers_leave_ctrl_c_to_the_training_process(cluster):
    # Ctrl-C reaches every process of the terminal's group: the training
    # process takes it, and its workers go on (they are stopped by it, or
    # by their pipes closing), so an interrupted loop can start again with
    # the same workers.
    import os
    import signal

    ds = st.IterableDataset("points", batch_size=50, transform=keep_x)
    loader = st.DataLoader(ds, num_workers=2)
    it = iter(loader)
    ids = next(it)["id"].tolist()
    pids = [p.pid for p in loader._pool.procs]
    for pid in pids:
        os.kill(pid, signal.SIGINT)
    ids += [i for b in it for i in b["id"].tolist()]
    assert sorted(ids) == list(range(N))
    assert [p.pid for p in loader._pool.procs] == pids and all(p.is_alive() for p in loader._pool.procs)


def sluice_error():
    import sluice

    return sluice.SluiceError


def test_freed_batches_reach_their_workers_in_groups(cluster):
    # A budget of a few dozen batches per worker: the training process
    # tells a worker of freed batches several at a time, and before it waits
    # for one. Two epochs would exhaust the budget if any were never told.
    ds = st.IterableDataset("points", batch_size=20, shuffle=True, seed=1, transform=keep_x, prefetch_bytes=128 << 10)
    loader = st.DataLoader(ds, num_workers=2, timeout=60)
    told = []
    real = st._release
    st._release = lambda name, *seqs: (told.append(len(seqs)), real(name, *seqs))
    try:
        for epoch in range(2):
            ds.set_epoch(epoch)
            assert sorted(i for b in loader for i in b["id"].tolist()) == list(range(N))
    finally:
        st._release = real
    # Each worker may have a group not yet told when the loop ends.
    assert sum(told) >= 2 * N // 20 - 2 * (st._Receiver._RELEASE_EVERY - 1) and max(told) > 1, told[:20]


def count_calls(path, batch):
    with open(path, "a") as f:
        f.write("%d\n" % torch.utils.data.get_worker_info().id)
    return batch


@pytest.mark.parametrize("prefetch_bytes,ahead", [(1, st._PREFETCH), (None, st._MAX_AHEAD)])
def test_workers_run_ahead_within_their_window(cluster, tmp_path, prefetch_bytes, ahead):
    # As torch's prefetch_factor: a batch made or sent and not yet taken
    # holds loader memory, so a worker makes two such at most, or, when
    # batches are small against its budget, up to _MAX_AHEAD (these are
    # about 8 KB against a default budget of 128 MiB a worker).
    import functools
    import time

    path = str(tmp_path / "calls")
    ds = st.IterableDataset("points", batch_size=100, shuffle=False, transform=functools.partial(count_calls, path),
                            prefetch_bytes=prefetch_bytes)
    loader = st.DataLoader(ds, num_workers=2)
    it = iter(loader)
    next(it)  # worker 0's first: it may make its window's worth more
    time.sleep(2)
    calls = open(path).read().split()
    assert (calls.count("0"), calls.count("1")) == (1 + ahead, st._PREFETCH), calls
    assert sum(1 for _ in it) == N // 100 - 1  # each batch dropped at once: the smallest budget holds few
