"""Python loader against the Go loader and against a torch DataLoader over
local files, same samples, same run.

    make build python && .venv/bin/python benchmarks/python_loader.py

Starts `sluice dev` in a temporary directory, imports N samples of SIZE bytes
(Parquet -> `sluice dataset import`), and alternates, ROUNDS times:
  go      `sluice dataset bench` (the Go loader, shuffled epochs)
  python  sluice.Dataset(...).loader(...) iterated as pyarrow batches
  torch   torch.utils.data.DataLoader(num_workers=2, shuffle=True) over a
          map-style dataset reading one local file per sample (page cache),
          default collation into a uint8 tensor
and prints per round and the median ratios python/go (batches/s) and
sluice/torch (samples/s).
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
import pyarrow.parquet as pq

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
import sluice  # noqa: E402

import devcluster  # noqa: E402

SLUICE = os.path.join(REPO, "bin", "sluice")
N = int(os.environ.get("N", 20000))
SIZE = int(os.environ.get("SIZE", 4096))
BATCH = int(os.environ.get("BATCH", 256))
EPOCHS = int(os.environ.get("EPOCHS", 2))
ROUNDS = int(os.environ.get("ROUNDS", 3))


class Files:
    """A map-style dataset of one local file per sample."""

    def __init__(self, d):
        self.d = d

    def __len__(self):
        return N

    def __getitem__(self, i):
        import torch
        with open(os.path.join(self.d, "%d.bin" % i), "rb") as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)


def main():
    tmp = tempfile.mkdtemp(prefix="sluice-pybench-")
    dev, _ = devcluster.start(os.path.join(tmp, "dev"))
    try:
        rng = np.random.default_rng(0)
        samples = [rng.integers(0, 256, SIZE, dtype=np.uint8).tobytes() for _ in range(N)]
        files = os.path.join(tmp, "files")
        os.makedirs(files)
        for i, s in enumerate(samples):
            with open(os.path.join(files, "%d.bin" % i), "wb") as f:
                f.write(s)
        src = os.path.join(tmp, "data.parquet")
        pq.write_table(pa.table({"data": pa.array(samples, pa.binary()), "label": pa.array(np.arange(N) % 10)}), src)
        subprocess.run([SLUICE, "dataset", "import", "-q", "--format", "parquet", src, "bench"], check=True,
                       stdout=subprocess.DEVNULL)

        def go():
            out = subprocess.run([SLUICE, "dataset", "bench", "bench", "--batch-size", str(BATCH),
                                  "--epochs", str(EPOCHS)], check=True, capture_output=True, text=True).stdout
            r = json.loads(out)
            return r["batches_per_s"], r["samples_per_s"]

        ds = sluice.Dataset("bench")
        loader = ds.loader(batch_size=BATCH, shuffle=True, seed=0)

        def python():
            batches = rows = 0
            t0 = time.perf_counter()
            for e in range(EPOCHS):
                loader.set_epoch(e)
                for b in loader:
                    batches += 1
                    rows += b.num_rows
            s = time.perf_counter() - t0
            return batches / s, rows / s

        def torch_files():
            import torch.utils.data
            dl = torch.utils.data.DataLoader(Files(files), batch_size=BATCH, shuffle=True, num_workers=2,
                                             multiprocessing_context="spawn", persistent_workers=True)
            t0 = time.perf_counter()
            rows = 0
            for _ in range(EPOCHS):
                for b in dl:
                    rows += len(b)
            s = time.perf_counter() - t0
            return None, rows / s

        x_go, x_torch = [], []
        for r in range(ROUNDS):
            g, p, t = go(), python(), torch_files()
            x_go.append(p[0] / g[0])
            x_torch.append(p[1] / t[1])
            print("round %d: go %.0f batches/s, python %.0f batches/s (%.0f samples/s), torch files %.0f samples/s: "
                  "python/go %.2f, sluice/torch %.2f" % (r, g[0], p[0], p[1], t[1], x_go[-1], x_torch[-1]), flush=True)
        print("N=%d SIZE=%d BATCH=%d: python/go median %.2f (range %.2f-%.2f); sluice/torch median %.2f (range %.2f-%.2f)"
              % (N, SIZE, BATCH, statistics.median(x_go), min(x_go), max(x_go),
                 statistics.median(x_torch), min(x_torch), max(x_torch)))
    finally:
        dev.terminate()
        dev.wait()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
