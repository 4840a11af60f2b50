"""Never hang, always interruptible: dead addresses, a paused cluster,
Ctrl-C, and the options that used to be taken silently."""
import gc
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sluice
from conftest import N, REPO, SLUICE, start_dev


def dead_address():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    addr = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    return addr


def test_connect_dead_address_raises_fast():
    start = time.time()
    with pytest.raises(sluice.SluiceError, match="refused"):
        sluice.Client(dead_address(), "token")
    assert time.time() - start < 8


def test_connect_malformed_address_raises():
    with pytest.raises(sluice.SluiceError, match="malformed address"):
        sluice.Client("no-port-here", "token")


def test_connect_wrong_token_raises(cluster):
    with pytest.raises(sluice.SluiceError, match="(?i)unauthenticated|token"):
        sluice.Client(cluster["SLUICE_CLUSTER"], "wrong-token")


def test_op_timeout_parsing():
    assert sluice._lib.parse_duration("500ms") == 0.5
    assert sluice._lib.parse_duration("2m") == 120
    assert sluice._lib.op_timeout_ns(0) == -1
    with pytest.raises(ValueError):
        sluice._lib.parse_duration("soon")


def test_world_size_and_rank_checked(cluster):
    ds = sluice.Dataset("points")
    with pytest.raises(sluice.SluiceError, match="world_size 0"):
        ds.loader(batch_size=10, world_size=0)
    with pytest.raises(sluice.SluiceError, match="rank 2"):
        ds.loader(batch_size=10, rank=2, world_size=2)
    with pytest.raises(sluice.SluiceError, match="rank -1"):
        ds.loader(batch_size=10, rank=-1, world_size=2)


def test_env_read_at_call_time(cluster, monkeypatch):
    monkeypatch.setattr(sluice, "_default", None)  # not one an earlier test made with connect()
    sluice.Dataset("points").close()  # the default client, from the environment
    monkeypatch.setenv("SLUICE_CLUSTER", dead_address())
    with pytest.raises(sluice.SluiceError, match="refused"):
        sluice.Dataset("points")
    monkeypatch.setenv("SLUICE_CLUSTER", cluster["SLUICE_CLUSTER"])
    assert len(sluice.Dataset("points")) == N


def test_from_stream_keeps_loader_alive(cluster):
    ds = sluice.Dataset("points")
    reader = pa.RecordBatchReader.from_stream(ds.loader(batch_size=100, shuffle=False))
    gc.collect()
    assert sum(b.num_rows for b in reader) == N


@pytest.fixture(scope="module")
def own_cluster():
    """A cluster of its own with file /f and dataset "small"."""
    d = tempfile.mkdtemp(prefix="sluice-py-pause-")
    proc, env = start_dev(d)
    src = os.path.join(d, "small.parquet")
    pq.write_table(pa.table({"v": pa.array([bytes([i % 251]) * 4096 for i in range(3000)], pa.binary())}), src)
    subprocess.run([SLUICE, "dataset", "import", "-q", "--format", "parquet", src, "small"], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, **env})
    c = sluice.Client(env["SLUICE_CLUSTER"], env["SLUICE_TOKEN"])
    with c.open("/f", "w") as f:
        f.pwrite(b"x" * 100000, 0)
    c.close()
    yield env, proc
    os.kill(proc.pid, signal.SIGCONT)
    proc.terminate()
    proc.wait(timeout=30)
    subprocess.run(["rm", "-rf", d])


@pytest.fixture
def paused(own_cluster):
    """own_cluster's environment, and a function that pauses it (SIGSTOP)
    until the test ends."""
    env, proc = own_cluster
    yield env, lambda: os.kill(proc.pid, signal.SIGSTOP)
    os.kill(proc.pid, signal.SIGCONT)


def test_paused_cluster_raises_within_op_timeout(paused):
    env, pause = paused
    c = sluice.Client(env["SLUICE_CLUSTER"], env["SLUICE_TOKEN"], op_timeout=1)
    f = c.open("/f")
    ds = c.dataset("small")
    loader = ds.loader(batch_size=10, shuffle=False, prefetch_bytes=1, readers=1)
    it = iter(loader)
    next(it)
    pause()
    start = time.time()
    with pytest.raises(sluice.SluiceError, match="timed out"):
        f.pread(100000, 0)
    with pytest.raises(sluice.SluiceError, match="timed out"):
        for _ in it:
            pass
    assert time.time() - start < 10


def test_ctrl_c_interrupts_a_blocked_call(paused):
    env, pause = paused
    # Only Ctrl-C ends the call within the 5 s asserted below; the timeout
    # is there so that a lost signal fails the test instead of hanging it.
    c = sluice.Client(env["SLUICE_CLUSTER"], env["SLUICE_TOKEN"], op_timeout=30)
    f = c.open("/f")
    pause()
    assert interrupted_after(0.5, lambda: f.pread(100000, 0)) < 5


def interrupted_after(delay, fn):
    """Runs fn, which must block, with a Ctrl-C (SIGINT) sent to this
    process after delay seconds; fn must end in KeyboardInterrupt. Returns
    how long that took."""
    # Python's own handler, whatever an earlier test's library (pyarrow,
    # DuckDB, Polars) left installed at the C level.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    start = time.time()
    try:
        with pytest.raises(KeyboardInterrupt):
            fn()
    finally:
        timer.cancel()
    return time.time() - start


def test_ctrl_c_interrupts_a_loader_waiting_for_a_batch(own_cluster, paused):
    # The main thread waits for a batch in short calls (no helper thread):
    # Ctrl-C must still end the wait, and the epoch go on afterwards with
    # no sample lost or repeated.
    env, pause = paused
    c = sluice.Client(env["SLUICE_CLUSTER"], env["SLUICE_TOKEN"], op_timeout=30)
    loader = c.dataset("small").loader(batch_size=10, shuffle=False, prefetch_bytes=1, readers=1)
    it = iter(loader)
    seen = []

    def keep(b):  # the first byte of each sample; the batch itself goes
        seen.extend(v[0] for v in b.column("v").to_pylist())
    keep(next(it))
    pause()

    def rest():
        for b in it:
            keep(b)
    assert interrupted_after(1.0, rest) < 6
    os.kill(own_cluster[1].pid, signal.SIGCONT)
    for b in loader:  # the rest of the epoch
        keep(b)
    assert seen == [i % 251 for i in range(3000)]


def test_exit_with_a_loader_still_open(cluster, python):
    # Closing at interpreter exit cannot use a helper thread (none starts
    # then): the process must still end, not wait forever.
    script = ("import sluice\nl = sluice.Dataset('points').loader(batch_size=10)\n"
              "it = iter(l)\nnext(it)\nprint('read')\n")
    out = subprocess.run([python, "-c", script], env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "python")),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "read\n", out.stderr


def test_keeping_every_batch_raises_instead_of_stalling(cluster):
    # A common habit: keep a zero-copy view of each batch. Past twice the
    # budget the loader says what to do rather than waiting forever.
    ds = sluice.Dataset("points")
    loader = ds.loader(batch_size=50, shuffle=True, seed=1, prefetch_bytes=1)
    kept = []
    with pytest.raises(sluice.SluiceError, match="release batches"):
        for batch in loader:
            kept.append(batch.column("id").to_numpy())
    assert 3 <= len(kept) < N // 50
    del kept
    gc.collect()
    rest = sum(b.num_rows for b in loader)  # continues after the last batch delivered
    assert rest > 0 and loader.state_dict()["consumed"] == N
