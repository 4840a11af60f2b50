"""Sluice's loaders against the loaders ML engineers pick instead, on the same
samples, same machine, same run: `make bench-peers` (installs the peers into
.venv first; not part of CI).

For each sample size (4 KiB, 128 KiB, 1 MiB) it makes one set of samples,
writes it in each system's format, reads one epoch with each to warm the page
cache (and start persistent workers), then runs ROUNDS interleaved rounds of
one shuffled epoch per system. Every epoch is checked: each sample comes
exactly once, each sample's first 8 bytes are its id, and the sum of every
payload byte equals the sum of what was written (so every byte is touched, as
a training step would). Reported: median samples/s per system and size.

Systems (how each reads a shuffled epoch of batches):
  sluice-python     sluice.Dataset(...).loader(shuffle=True) -> pyarrow batches
  sluice-torch-0    sluice.torch.DataLoader, no workers -> dicts of tensors
  sluice-torch-2    sluice.torch.DataLoader(num_workers=2) with a transform
                    (identity), so batches cross from workers
  sluice-go         `sluice dataset bench --check` (the Go loader)
  each sluice-* also as sluice-*-agent: through the local agent of
                    `sluice dev` (shared-memory rings), not over TCP
  pyarrow-ipc       memory-mapped Arrow IPC file, Table.take of each batch
  hf-datasets       Hugging Face datasets: load_from_disk, shuffle, iter(arrow)
  lance             lance dataset, take of each batch
  mds               Mosaic Streaming StreamingDataset (shuffle), batched here
  webdataset        tar shards, shard shuffle + 1,000-sample buffer shuffle
  torch-files       one file per sample, torch DataLoader(num_workers=2,
                    shuffle=True, persistent workers)

Environment: ROUNDS (5), SIZES ("4KiB,128KiB,1MiB"), SYSTEMS (all),
N_4KiB (200000), N_128KiB (8000), N_1MiB (512), OUT (benchmarks/results),
AGENT_PROCESS (when set, the sluice-*-agent systems read through a `sluice
agent` process of their own, over TCP to the cluster, as on a training host
with storage elsewhere, instead of `sluice dev`'s agent), HUGEPAGES (as root:
reserve this many 2 MiB huge pages for the run, as an operator would for the
loaders' shared memory, and give the old count back after; the results
record the pages reserved either way), SHMEM_THP (as root: when the kernel
may back shared memory with transparent huge pages for the run, e.g.
"advise", as an operator may allow instead of reserving pages; recorded
either way).
Writes OUT/peers-DATE.json and OUT/peers-DATE.png (when matplotlib is there).
"""
import datetime
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
import sluice  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import devcluster  # noqa: E402

SLUICE = os.path.join(REPO, "bin", "sluice")
ROUNDS = int(os.environ.get("ROUNDS", 5))
SIZES = {"4KiB": (4 << 10, 256), "128KiB": (128 << 10, 128), "1MiB": (1 << 20, 32)}  # bytes, batch size
# Epochs long enough that a round is not a system's start-up (an epoch of
# 50,000 × 4 KiB or 2,000 × 128 KiB took a tenth of a second or two, and
# per-round ratios spread 0.6-1.2): 800 MiB, 1 GiB and 512 MiB.
COUNTS = {"4KiB": 200000, "128KiB": 8000, "1MiB": 512}


class Check:
    """Exactly once, ids in the payload, and the sum of every byte."""

    def __init__(self, n, size, want_sum):
        self.n, self.size, self.want_sum = n, size, want_sum
        self.seen = np.zeros(n, np.int32)
        self.sum = 0
        self.samples = 0

    def batch(self, ids, payload):
        """ids: int64 array; payload: the batch's samples end to end (uint8)."""
        ids = np.asarray(ids, dtype=np.int64)
        rows = payload.reshape(len(ids), self.size)
        heads = np.ascontiguousarray(rows[:, :8]).view("<i8").ravel()
        if not np.array_equal(heads, ids):
            raise AssertionError("sample bytes do not match their ids")
        self.seen[ids] += 1
        self.sum += int(payload.sum(dtype=np.uint64))
        self.samples += len(ids)

    def done(self):
        if not (self.seen == 1).all():
            bad = int(np.flatnonzero(self.seen != 1)[0])
            raise AssertionError("sample %d delivered %d times" % (bad, self.seen[bad]))
        if self.sum != self.want_sum:
            raise AssertionError("byte sum %d, wrote %d" % (self.sum, self.want_sum))


def binary_payload(col):
    """The value bytes of a binary column (a pyarrow Array) with no copy."""
    offs = np.frombuffer(col.buffers()[1], dtype=np.int32)[col.offset: col.offset + len(col) + 1]
    return np.frombuffer(col.buffers()[2], dtype=np.uint8)[offs[0]: offs[-1]]


def arrow_batches(check, batches):
    for b in batches:
        for rb in (b.to_batches() if isinstance(b, pa.Table) else [b]):
            data = rb.column(rb.schema.get_field_index("data"))
            ids = rb.column(rb.schema.get_field_index("id")).to_numpy()
            check.batch(ids, binary_payload(data))


def samples_batches(check, samples, batch):
    """Per-sample systems: (id, bytes) pairs, batched here."""
    ids, blobs = [], []
    for i, blob in samples:
        ids.append(int(i))
        blobs.append(blob)
        if len(ids) == batch:
            check.batch(ids, np.frombuffer(b"".join(blobs), np.uint8))
            ids, blobs = [], []
    if ids:
        check.batch(ids, np.frombuffer(b"".join(blobs), np.uint8))


def identity(batch):
    return batch


# Each system: make(dir, table, size, batch) -> an epoch function
# epoch(check, seed) that reads one shuffled epoch into check.

def sluice_python(agent):
    def make(d, table, size, batch, name):
        ds = sluice.Dataset(name)
        loader = ds.loader(batch_size=batch, shuffle=True, agent=agent())

        def epoch(check, seed):
            loader.set_epoch(seed)
            arrow_batches(check, loader)
        return epoch
    return make


def sluice_torch(workers, agent):
    def make(d, table, size, batch, name):
        import sluice.torch as st
        ds = st.IterableDataset(name, batch_size=batch, shuffle=True, transform=identity if workers else None,
                                agent=agent())
        dl = st.DataLoader(ds, num_workers=workers)

        def epoch(check, seed):
            ds.set_epoch(seed)
            for b in dl:
                check.batch(b["id"].numpy(), b["data"].numpy())
        return epoch
    return make


def sluice_go(agent):
    def make(d, table, size, batch, name):
        def epoch(check, seed):
            out = subprocess.run([SLUICE, "dataset", "bench", name, "--batch-size", str(batch), "--epochs", "1",
                                  "--seed", str(seed), "--check", "--agent", agent()], check=True, capture_output=True,
                                 text=True).stdout
            r = json.loads(out)
            if r["byte_sum"] != check.want_sum:
                raise AssertionError("go: byte sum %d, wrote %d" % (r["byte_sum"], check.want_sum))
            check.seen[:] = 1  # checked by the Go side (--check fails on a repeat or a miss)
            check.sum = check.want_sum
            check.samples = check.n
            return r["seconds"]
        return epoch
    return make


def pyarrow_ipc(d, table, size, batch, name):
    path = os.path.join(d, "data.arrow")
    with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)  # one record batch: take on one chunk, as pyarrow users do
    t = pa.ipc.open_file(pa.memory_map(path)).read_all()

    def epoch(check, seed):
        perm = np.random.default_rng(seed).permutation(len(t))
        arrow_batches(check, (t.take(perm[i:i + batch]) for i in range(0, len(perm), batch)))
    return epoch


def hf_datasets(d, table, size, batch, name):
    import datasets
    datasets.disable_progress_bars()
    path = os.path.join(d, "hf")
    datasets.Dataset(datasets.table.InMemoryTable(table)).save_to_disk(path)
    ds = datasets.load_from_disk(path)

    def epoch(check, seed):
        arrow_batches(check, ds.shuffle(seed=seed).with_format("arrow").iter(batch_size=batch))
    return epoch


def lance_take(d, table, size, batch, name):
    import lance
    path = os.path.join(d, "data.lance")
    lance.write_dataset(table, path)
    ds = lance.dataset(path)

    def epoch(check, seed):
        perm = np.random.default_rng(seed).permutation(ds.count_rows())
        arrow_batches(check, (ds.take(perm[i:i + batch]) for i in range(0, len(perm), batch)))
    return epoch


def mds(d, table, size, batch, name):
    from streaming import MDSWriter, StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    path = os.path.join(d, "mds")
    ids, data = table.column("id").to_pylist(), table.column("data").to_pylist()
    with MDSWriter(out=path, columns={"id": "int64", "data": "bytes"}, size_limit=64 << 20) as w:
        for i, blob in zip(ids, data):
            w.write({"id": i, "data": blob})

    def epoch(check, seed):
        clean_stale_shared_memory()
        ds = StreamingDataset(local=path, shuffle=True, shuffle_seed=seed, batch_size=batch)
        samples_batches(check, ((s["id"], s["data"]) for s in ds), batch)
        del ds
    return epoch


def webdataset(d, table, size, batch, name):
    import webdataset as wds
    os.makedirs(os.path.join(d, "wds"))
    pattern = os.path.join(d, "wds", "shard-%05d.tar")
    ids, data = table.column("id").to_pylist(), table.column("data").to_pylist()
    with wds.ShardWriter(pattern, maxsize=64 << 20, verbose=0) as w:
        for i, blob in zip(ids, data):
            w.write({"__key__": "%08d" % i, "bin": blob})
    urls = sorted(glob.glob(os.path.join(d, "wds", "*.tar")))

    def epoch(check, seed):
        ds = wds.WebDataset(urls, shardshuffle=len(urls), seed=seed).shuffle(1000).to_tuple("__key__", "bin")
        samples_batches(check, ((int(k), b) for k, b in ds), batch)
    return epoch


class Files:
    """A map-style torch dataset of one local file per sample."""

    def __init__(self, d, n):
        self.d, self.n = d, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch
        with open(os.path.join(self.d, "%d.bin" % i), "rb") as f:
            return i, torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)


def torch_files(d, table, size, batch, name):
    import torch
    import torch.utils.data
    path = os.path.join(d, "files")
    os.makedirs(path)
    for i, blob in zip(table.column("id").to_pylist(), table.column("data").to_pylist()):
        with open(os.path.join(path, "%d.bin" % i), "wb") as f:
            f.write(blob)
    gen = torch.Generator()
    dl = torch.utils.data.DataLoader(Files(path, len(table)), batch_size=batch, shuffle=True, num_workers=2,
                                     generator=gen, multiprocessing_context="spawn", persistent_workers=True)

    def epoch(check, seed):
        gen.manual_seed(seed)
        for ids, x in dl:
            check.batch(ids.numpy(), x.numpy().ravel())
    return epoch


def direct():
    return ""


def agent():
    return AGENT


AGENT = ""  # the local agent's socket, from `sluice dev`

SYSTEMS = {
    "sluice-python": sluice_python(direct),
    "sluice-python-agent": sluice_python(agent),
    "sluice-torch-0": sluice_torch(0, direct),
    "sluice-torch-0-agent": sluice_torch(0, agent),
    "sluice-torch-2": sluice_torch(2, direct),
    "sluice-torch-2-agent": sluice_torch(2, agent),
    "sluice-go": sluice_go(direct),
    "sluice-go-agent": sluice_go(agent),
    "pyarrow-ipc": pyarrow_ipc,
    "hf-datasets": hf_datasets,
    "lance": lance_take,
    "mds": mds,
    "webdataset": webdataset,
    "torch-files": torch_files,
}


def samples(n, size):
    """n samples of size bytes: random, the first 8 bytes the sample's id."""
    data = np.random.default_rng(size).integers(0, 256, (n, size), dtype=np.uint8)
    data[:, :8] = np.arange(n, dtype="<i8").view(np.uint8).reshape(n, 8)
    want = int(data.sum(dtype=np.uint64))
    offsets = pa.array(np.arange(0, (n + 1) * size, size, dtype=np.int32))
    col = pa.BinaryArray.from_buffers(pa.binary(), n, [None, offsets.buffers()[1], pa.py_buffer(data.ravel())])
    return pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "data": col}), want


def chart(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart")
        return
    sizes = [s for s in SIZES if s in results]
    systems = [s for s in SYSTEMS if any(s in results[z] for z in sizes)]
    fig, ax = plt.subplots(figsize=(11, 5))
    w = 0.8 / len(systems)
    for k, name in enumerate(systems):
        xs = [i + k * w for i in range(len(sizes))]
        ys = [results[z].get(name, {}).get("median", 0) for z in sizes]
        ax.bar(xs, ys, w, label=name, color=("C%d" % k), edgecolor="black" if name.startswith("sluice") else None)
    ax.set_xticks([i + 0.4 - w / 2 for i in range(len(sizes))], sizes)
    ax.set_yscale("log")
    ax.set_ylabel("samples/s (one shuffled epoch, median)")
    ax.set_title("Sluice and its peers, same samples, same machine, same run")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("chart:", path)


NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"


def hugepages(n=None):
    """The 2 MiB huge pages reserved; with n, reserves n first."""
    try:
        if n is not None:
            with open(NR_HUGEPAGES, "w") as f:
                f.write(str(n))
        with open(NR_HUGEPAGES) as f:
            return int(f.read())
    except OSError as e:
        if n is not None:
            raise SystemExit("huge pages: %s (HUGEPAGES needs root)" % e)
        return 0


SHMEM_THP = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"


def shmem_thp(mode=None):
    """When the kernel backs shared memory with transparent huge pages
    (never, advise, always, ...); with mode, sets it first."""
    try:
        if mode is not None:
            with open(SHMEM_THP, "w") as f:
                f.write(mode)
        with open(SHMEM_THP) as f:
            text = f.read()
    except OSError as e:
        if mode is not None:
            raise SystemExit("transparent huge pages: %s (SHMEM_THP needs root)" % e)
        return "unknown"
    return text[text.find("[") + 1: text.find("]")] if "[" in text else text.strip()


def main():
    before_pages, before_thp = hugepages(), shmem_thp()
    if os.environ.get("HUGEPAGES"):
        hugepages(int(os.environ["HUGEPAGES"]))
    if os.environ.get("SHMEM_THP"):
        shmem_thp(os.environ["SHMEM_THP"])
    try:
        run(hugepages(), shmem_thp())
    finally:
        if os.environ.get("HUGEPAGES"):
            hugepages(before_pages)
        if os.environ.get("SHMEM_THP"):
            shmem_thp(before_thp)


def run(pages, thp):
    sizes = [s for s in os.environ.get("SIZES", ",".join(SIZES)).split(",") if s]
    systems = [s for s in os.environ.get("SYSTEMS", ",".join(SYSTEMS)).split(",") if s]
    out_dir = os.environ.get("OUT", os.path.join(REPO, "benchmarks", "results"))
    tmp = tempfile.mkdtemp(prefix="sluice-peers-")
    global AGENT
    dev, env = devcluster.start(os.path.join(tmp, "dev"))
    AGENT = env["SLUICE_AGENT"]
    agent = None
    results = {}
    try:
        if os.environ.get("AGENT_PROCESS"):
            AGENT = os.path.join(tmp, "agent.sock")
            agent = subprocess.Popen([SLUICE, "agent", "--socket", AGENT], stderr=subprocess.DEVNULL)
            while not os.path.exists(AGENT):
                if agent.poll() is not None:
                    raise SystemExit("sluice agent exited")
                time.sleep(0.1)
        for size_name in sizes:
            size, batch = SIZES[size_name]
            n = int(os.environ.get("N_" + size_name, COUNTS[size_name]))
            table, want = samples(n, size)
            d = os.path.join(tmp, size_name)
            os.makedirs(d)
            src = os.path.join(d, "data.parquet")
            pq.write_table(table, src, row_group_size=max(1, (64 << 20) // size), compression="none")
            name = "peers-" + size_name.lower()
            subprocess.run([SLUICE, "dataset", "import", "-q", "--format", "parquet", src, name], check=True,
                           stdout=subprocess.DEVNULL)
            epochs = {}
            for s in systems:
                sd = os.path.join(d, s)
                os.makedirs(sd)
                epochs[s] = SYSTEMS[s](sd, table, size, batch, name)
            del table
            rates = {s: [] for s in systems}
            for r in range(ROUNDS + 1):  # round 0 warms the cache and is not counted
                for s in systems:
                    check = Check(n, size, want)
                    t0 = time.perf_counter()
                    secs = epochs[s](check, r + 1)
                    secs = secs or (time.perf_counter() - t0)
                    check.done()
                    if r > 0:
                        rates[s].append(n / secs)
                        print("%-7s round %d %-15s %10.0f samples/s" % (size_name, r, s, n / secs), flush=True)
            results[size_name] = {s: {"median": statistics.median(v), "rounds": v} for s, v in rates.items()}
            epochs.clear()
    finally:
        if agent:
            agent.terminate()
            agent.wait()
        dev.terminate()
        dev.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    stamp = datetime.date.today().isoformat()
    os.makedirs(out_dir, exist_ok=True)
    doc = {"date": stamp, "machine": "%s, %d CPUs" % (platform.machine(), os.cpu_count()), "rounds": ROUNDS, "hugepages": pages,
           "shmem_thp": thp,
           "counts": {s: int(os.environ.get("N_" + s, COUNTS[s])) for s in sizes},
           "batch": {s: SIZES[s][1] for s in sizes}, "results": results}
    path = os.path.join(out_dir, "peers-%s.json" % stamp)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print("results:", path)
    chart(results, os.path.join(out_dir, "peers-%s.png" % stamp))
    print("\n| system | " + " | ".join(sizes) + " |\n|---|" + "---|" * len(sizes))
    for s in systems:
        print("| %s | %s |" % (s, " | ".join("%.0f" % results[z][s]["median"] for z in sizes)))


if __name__ == "__main__":
    main()
