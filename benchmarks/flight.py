"""Arrow Flight DoGet from `sluice dev --flight` against the in-process
Python loader and against a pyarrow.flight server serving the same batches
from memory (the Flight ceiling on this machine), and four Flight readers
(one per rank, four processes) against one. Same run, interleaved rounds.

    make build python && .venv/bin/python benchmarks/flight.py

Starts `sluice dev --flight` (3 targets, chains of --replicas REPLICAS) in a
temporary directory and imports, for each sample size in SIZES (bytes),
TOTAL_MIB of random samples (Arrow IPC stream -> `sluice dataset import
--format arrow -`). Each round reads one shuffled epoch of each dataset:
  flight   pyarrow.flight DoGet of rank 0 of 1 from Sluice's Flight server
  python   sluice.Dataset(...).loader(...) in this process (libsluice)
  ceiling  pyarrow.flight DoGet from a pyarrow.flight server (a child
           process) holding the same batches in memory
  four     four reader processes, DoGet of ranks 0..3 of 4, at once; and
           four reading a quarter of the batches each from the ceiling
           (what four readers can get on this machine at all)
Batches hold about BATCH_MIB of samples. Prints per round MB/s and the
median ratios flight/ceiling, flight/python, four/one and the ceiling's
own four/one.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
import sluice  # noqa: E402

import devcluster  # noqa: E402

SLUICE = os.path.join(REPO, "bin", "sluice")
TOTAL_MIB = int(os.environ.get("TOTAL_MIB", 1024))
SIZES = [int(s) for s in os.environ.get("SIZES", "65536,1048576").split(",")]
BATCH_MIB = int(os.environ.get("BATCH_MIB", 8))
ROUNDS = int(os.environ.get("ROUNDS", 3))
REPLICAS = os.environ.get("REPLICAS", "1")


def options():
    return fl.FlightCallOptions(headers=[(b"authorization", b"Bearer " + os.environ["SLUICE_TOKEN"].encode())])


def drain(client, ticket, opts):
    """Reads a DoGet stream to its end, touching nothing: bytes read."""
    reader = client.do_get(ticket, opts)
    n = 0
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            return n
        n += chunk.data.nbytes


def reader_main(url, ticket):
    """A reader process: waits for its go line, drains one ticket, prints
    start, end and bytes."""
    client = fl.connect(url)
    sys.stdin.readline()
    t0 = time.time()
    n = drain(client, fl.Ticket(ticket.encode()), options() if "SLUICE_TOKEN" in os.environ else None)
    print(json.dumps([t0, time.time(), n]), flush=True)


class Memory(fl.FlightServerBase):
    """The ceiling: a pyarrow.flight server with the batches in memory."""

    def __init__(self, location, tables):
        super().__init__(location)
        self.tables = tables

    def do_get(self, context, ticket):
        # NAME, or NAME#K: the K-th of four equal parts (the four readers).
        name, _, part = ticket.ticket.decode().partition("#")
        t = self.tables[name]
        if part:
            n = t.num_rows // 4
            t = t.slice(int(part) * n, n)
        return fl.RecordBatchStream(t)


def ceiling_main(names):
    """The ceiling server process: reads each dataset into memory once in
    the benchmark's batches, serves them, prints its port."""
    tables = {}
    for name in names.split(","):
        batch = int(name.split("-")[1])
        # Held whole: the loader's budget must hold every batch.
        tables[name] = sluice.Dataset(name).to_reader(batch_size=batch, prefetch_bytes=(TOTAL_MIB + 64) << 20).read_all()
    server = Memory("grpc://127.0.0.1:0", tables)
    print(server.port, flush=True)
    server.serve()


def import_dataset(name, size, n):
    """n random samples of size bytes, streamed into `sluice dataset import -`."""
    imp = subprocess.Popen([SLUICE, "dataset", "import", "--format", "arrow", "-", name], stdin=subprocess.PIPE,
                           stdout=subprocess.DEVNULL)
    schema = pa.schema([("id", pa.int64()), ("data", pa.binary())])
    rng = np.random.default_rng(size)
    with pa.ipc.new_stream(imp.stdin, schema) as w:
        per = max(1, (16 << 20) // size)
        block = rng.integers(0, 256, per * size, dtype=np.uint8).tobytes()
        for lo in range(0, n, per):
            k = min(per, n - lo)
            offsets = pa.array(np.arange(k + 1, dtype=np.int32) * size)
            data = pa.BinaryArray.from_buffers(pa.binary(), k, [None, offsets.buffers()[1], pa.py_buffer(block)])
            w.write_batch(pa.record_batch([pa.array(np.arange(lo, lo + k)), data], schema=schema))
    imp.stdin.close()
    if imp.wait() != 0:
        raise SystemExit("import %s failed" % name)


def main():
    tmp = tempfile.mkdtemp(prefix="sluice-flightbench-")
    dev, env = devcluster.start(os.path.join(tmp, "dev"), "--replicas", REPLICAS, "--flight", "127.0.0.1:0",
                                "--flight-max-streams", "8")
    ceiling = None
    try:
        names = {}
        for size in SIZES:
            batch = max(1, (BATCH_MIB << 20) // size)
            name = "bench-%d-%d" % (batch, size)
            import_dataset(name, size, (TOTAL_MIB << 20) // size)
            names[size] = name
        ceiling = subprocess.Popen([sys.executable, __file__, "ceiling", ",".join(names.values())],
                                   stdout=subprocess.PIPE, text=True, env=dict(os.environ))
        ceiling_url = "grpc://127.0.0.1:%s" % ceiling.stdout.readline().strip()
        client, mem = fl.connect(env["SLUICE_FLIGHT"]), fl.connect(ceiling_url)

        def timed(fn):
            t0 = time.perf_counter()
            n = fn()
            return n / 1e6 / (time.perf_counter() - t0)

        def ticket(name, r, seed, world=1):
            batch = int(name.split("-")[1])
            return json.dumps({"dataset": name, "batch_size": batch, "shuffle": True, "seed": seed,
                               "rank": r, "world_size": world})

        def python(name, seed):
            batch = int(name.split("-")[1])
            n = 0
            for b in sluice.Dataset(name).loader(batch_size=batch, shuffle=True, seed=seed):
                n += b.nbytes
            return n

        def four(url, tickets):
            procs = [subprocess.Popen([sys.executable, __file__, "read", url, t],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for t in tickets]
            time.sleep(1.5)  # the readers import pyarrow and connect
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
            res = [json.loads(p.communicate()[0]) for p in procs]
            return sum(r[2] for r in res) / 1e6 / (max(r[1] for r in res) - min(r[0] for r in res))

        ratios = {}
        for r in range(ROUNDS):
            for size, name in names.items():
                f = timed(lambda: drain(client, fl.Ticket(ticket(name, 0, r).encode()), options()))
                p = timed(lambda: python(name, r))
                c = timed(lambda: drain(mem, fl.Ticket(name.encode()), None))
                q = four(env["SLUICE_FLIGHT"], [ticket(name, k, r, 4) for k in range(4)])
                cq = four(ceiling_url, ["%s#%d" % (name, k) for k in range(4)])
                x = ratios.setdefault(size, {"flight/ceiling": [], "flight/python": [], "four/one": [],
                                             "ceiling four/one": []})
                x["flight/ceiling"].append(f / c)
                x["flight/python"].append(f / p)
                x["four/one"].append(q / f)
                x["ceiling four/one"].append(cq / c)
                print("round %d size %d: flight %.0f MB/s, python %.0f MB/s, ceiling %.0f MB/s, four readers %.0f MB/s,"
                      " four from the ceiling %.0f MB/s" % (r, size, f, p, c, q, cq), flush=True)
        for size, x in ratios.items():
            print("TOTAL_MIB=%d size %d batch %d: %s" % (TOTAL_MIB, size, max(1, (BATCH_MIB << 20) // size), ", ".join(
                "%s median %.2f (%.2f-%.2f)" % (k, statistics.median(v), min(v), max(v)) for k, v in x.items())))
    finally:
        if ceiling is not None:
            ceiling.kill()
            ceiling.wait()
        dev.terminate()
        dev.wait()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "read":
        reader_main(sys.argv[2], sys.argv[3])
    elif len(sys.argv) > 1 and sys.argv[1] == "ceiling":
        ceiling_main(sys.argv[2])
    else:
        main()
