import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SLUICE = os.environ.get("SLUICE_BIN", os.path.join(REPO, "bin", "sluice"))
N = 4800  # samples in the test dataset
DIM = 16
W = np.linspace(-1, 1, DIM).astype(np.float32)  # the label is sign(x . W)


def sample(i):
    """Sample i of the test dataset: features, label, id."""
    x = np.random.default_rng(i).standard_normal(DIM).astype(np.float32)
    return x, int(x @ W > 0), i


def start_dev(d):
    """Starts `sluice dev` in d, with Arrow Flight on: the process and its
    SLUICE_* exports (SLUICE_CLUSTER, SLUICE_TOKEN, SLUICE_AGENT,
    SLUICE_FLIGHT)."""
    proc = subprocess.Popen([SLUICE, "dev", "--dir", d, "--listen", "127.0.0.1:0", "--targets", "3",
                             "--flight", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    env = {}
    deadline = time.time() + 60
    while len(env) < 4 and time.time() < deadline:
        line = proc.stdout.readline()
        m = re.match(r"export (SLUICE_\w+)=(\S+)", line)
        if m:
            env[m.group(1)] = m.group(2)
    if len(env) < 4:
        proc.kill()
        pytest.fail("sluice dev did not print its exports")
    return proc, env


@pytest.fixture(scope="session")
def cluster():
    """An embedded dev cluster in a child process, with dataset "points"."""
    d = tempfile.mkdtemp(prefix="sluice-py-")
    proc, env = start_dev(d)
    # The tests read directly from storage unless they ask for the agent
    # (env["SLUICE_AGENT"]).
    os.environ.update({k: v for k, v in env.items() if k != "SLUICE_AGENT"})
    xs, labels, ids = zip(*(sample(i) for i in range(N)))
    table = pa.table({"x": pa.array([x.tobytes() for x in xs], pa.binary()),
                      "label": pa.array(labels, pa.int64()), "id": pa.array(ids, pa.int64())})
    src = os.path.join(d, "points.parquet")
    pq.write_table(table, src)
    subprocess.run([SLUICE, "dataset", "import", "-q", "--format", "parquet", src, "points"], check=True,
                   stdout=subprocess.DEVNULL)
    yield env
    proc.terminate()
    proc.wait(timeout=30)
    subprocess.run(["rm", "-rf", d])


def go_order(name, **flags):
    """The Go loader's batches of sample indices (sluice dataset order)."""
    args = [SLUICE, "dataset", "order", name]
    for k, v in flags.items():
        args.append("--%s=%s" % (k.replace("_", "-"), str(v).lower() if isinstance(v, bool) else v))
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    import json
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture
def python():
    return sys.executable
