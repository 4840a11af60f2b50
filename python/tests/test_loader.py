import gc
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

import sluice
from conftest import N, go_order, sample


def indices(batches):
    return [b.column("__index__").to_pylist() for b in batches]


def test_dataset_basics(cluster):
    ds = sluice.Dataset("points")
    assert len(ds) == N
    assert ds.schema.names == ["x", "label", "id"]
    rec = ds.take([5, 0, 4799, 5])
    assert isinstance(rec, pa.RecordBatch)
    for r, i in enumerate([5, 0, 4799, 5]):
        x, label, _ = sample(i)
        assert rec.column("x")[r].as_py() == x.tobytes()
        assert rec.column("label")[r].as_py() == label
        assert rec.column("id")[r].as_py() == i
    assert ds.take([1, 2], columns=["id"]).schema.names == ["id"]
    with pytest.raises(sluice.SluiceError, match="out of range"):
        ds.take([N])
    with pytest.raises(sluice.SluiceError, match="nope"):
        ds.take([1], columns=["nope"])
    with pytest.raises(sluice.SluiceError):
        sluice.Dataset("no-such-dataset")


def test_values_equal_go_loader(cluster):
    ds = sluice.Dataset("points")
    for rank, world in [(0, 1), (1, 3)]:
        loader = ds.loader(batch_size=32, shuffle=True, seed=7, epoch=1, rank=rank, world_size=world,
                           index_column="__index__")
        got = indices(loader)
        assert got == go_order("points", batch_size=32, seed=7, epoch=1, rank=rank, world_size=world)
        assert len(got) == len(loader)
        loader.close()


def test_every_sample_once_per_epoch(cluster):
    ds = sluice.Dataset("points")
    loader = ds.loader(batch_size=100, shuffle=True, seed=3, index_column="__index__")
    orders = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        seen = []
        for b in loader:
            seen += b.column("__index__").to_pylist()
            ids = b.column("id").to_numpy()
            assert (ids == b.column("__index__").to_numpy()).all()
        assert sorted(seen) == list(range(N))
        orders.append(seen)
    assert orders[0] != orders[1]


def test_loader_through_the_local_agent(cluster):
    # The same batches as the direct path, landing in the Iov shared with
    # the agent (a memfd, mappable by another process).
    ds = sluice.Dataset("points")
    direct = ds.loader(batch_size=64, shuffle=True, seed=8, agent="")
    via = ds.loader(batch_size=64, shuffle=True, seed=8, agent=cluster["SLUICE_AGENT"])
    assert direct.shared_memory() is None and via.shared_memory() is not None
    a = [(b.column("id").to_pylist(), b.column("x").to_pylist()) for b in direct]
    b = [(b.column("id").to_pylist(), b.column("x").to_pylist()) for b in via]
    assert a == b and sum(len(ids) for ids, _ in b) == N
    with pytest.raises(sluice.SluiceError, match="local agent"):
        ds.loader(batch_size=64, agent=cluster["SLUICE_AGENT"] + ".none")


def test_resume_from_state_dict(cluster):
    ds = sluice.Dataset("points")
    opts = dict(batch_size=64, shuffle=True, seed=11, index_column="__index__")
    full = indices(ds.loader(**opts))
    for stop in (1, 17, 40):
        a = ds.loader(**opts)
        it = iter(a)
        first = [next(it).column("__index__").to_pylist() for _ in range(stop)]
        state = a.state_dict()
        assert state["consumed"] == 64 * stop
        a.close()
        b = ds.loader(**dict(opts, seed=999))  # seed comes from the state
        b.load_state_dict(state)
        assert first + indices(b) == full
    with pytest.raises(sluice.SluiceError, match="another dataset"):
        ds.loader(**opts).load_state_dict(dict(state, dataset_hash="00"))


def test_arrow_c_stream(cluster):
    loader = sluice.Dataset("points").loader(batch_size=1000, shuffle=False)
    reader = pa.RecordBatchReader.from_stream(loader)
    table = reader.read_all()
    assert table.num_rows == N
    assert table.column("id").to_pylist() == list(range(N))


def test_files(cluster):
    c = sluice.connect()
    data = os.urandom(3 << 20)
    with c.open("/py-file", "w") as f:
        f.pwrite(data[: 1 << 20], 0)
        f.pwrite(data[1 << 20:], 1 << 20)
    assert c.stat("/py-file")["size"] == len(data)
    with c.open("/py-file") as f:
        assert f.size() == len(data)
        assert f.pread(1000, 12345) == data[12345:13345]
        assert f.pread(10, len(data) - 4) == data[-4:]
    with pytest.raises(sluice.SluiceError, match="no such file"):
        c.open("/missing")
    with pytest.raises(sluice.SluiceError):
        c.open("/py-file", "w")  # exists


def test_errors_carry_go_messages(cluster):
    with pytest.raises(sluice.SluiceError, match="batch size 0"):
        sluice.Dataset("points").loader(batch_size=0)
    with pytest.raises(sluice.SluiceError, match="unknown field"):
        sluice.Dataset("points").loader(batch_size=1, bogus=1)


FORK_CHILD = r"""
import os, sys
import sluice
sluice.Dataset("points")  # loads the library
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        sluice.Dataset("points")
        msg = b"no error"
    except sluice.SluiceError as e:
        msg = str(e).encode()
    os.write(w, msg)
    os._exit(0)
os.waitpid(pid, 0)
print(os.read(r, 4096).decode())
"""


def test_fork_after_load_is_refused(cluster, python):
    out = subprocess.run([python, "-c", FORK_CHILD], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert "fork" in out.stdout and "spawn" in out.stdout, out.stdout + out.stderr


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_memory_flat_over_10000_batches(cluster):
    loader = sluice.Dataset("points").loader(batch_size=16, shuffle=True, seed=1)
    count, epoch, base = 0, 0, None
    while count < 10000:
        for b in loader:
            count += 1
            _ = b.column("x").buffers()[2]
            if count == 1000:
                gc.collect()
                base = rss()
            if count == 10000:
                break
        epoch += 1
        loader.set_epoch(epoch)
    gc.collect()
    grown = rss() - base
    assert grown < 32 << 20, "RSS grew by %d MiB over 9000 batches" % (grown >> 20)


def test_metrics(cluster):
    """sluice.metrics() is a dict of the client's and its loaders' counters,
    and an epoch through a loader moves them by what it delivered."""
    ds = sluice.Dataset("points")
    before = sluice.metrics()
    assert isinstance(before, dict)
    for name in ["sluice_client_read_bytes_total", "sluice_client_retries_total", "sluice_loader_batches_total",
                 "sluice_loader_samples_total", "sluice_loader_stall_seconds_total",
                 "sluice_loader_memory_wait_seconds_total", 'sluice_client_errors_total{kind="timeout"}']:
        assert name in before, name
    loader = ds.loader(batch_size=100, shuffle=False)
    rows = sum(b.num_rows for b in loader)
    steps = len(loader)
    loader.close()
    after = sluice.metrics()
    assert after["sluice_loader_samples_total"] - before["sluice_loader_samples_total"] == rows == N
    assert after["sluice_loader_batches_total"] - before["sluice_loader_batches_total"] == steps
    assert after["sluice_client_read_bytes_total"] > before["sluice_client_read_bytes_total"]
    assert after["sluice_loader_stall_seconds_total"] > before["sluice_loader_stall_seconds_total"]
