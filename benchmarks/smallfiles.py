"""Small-file metadata through POSIX: create N files of 4 KiB, stat them,
unlink them, in each directory given, interleaved rounds, medians.

    python3 benchmarks/smallfiles.py [--files 2000] [--rounds 3]
        [--writers 8] NAME=DIR [NAME=DIR ...]

Each round runs every phase in every directory before the next round, so
a slow spell on this shared machine hits every system alike. Phases:
create (open O_CREAT|O_EXCL, write 4 KiB, close), stat, unlink, each
one file at a time as `cp`, `stat` and `rm` do; then create with
--writers processes at once, all in the one directory (creates/s; the
kernel holds a directory's lock across each create's lookup and create,
so these take turns) and each in a directory of its own
(create_parallel_dirs, as sharded datasets lay files out). Prints one JSON object: seconds
per phase per system (median and range) and each system's ratio to the
first one named.
"""

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time

BLOCK = os.urandom(4096)


def create(d, names):
    for n in names:
        fd = os.open(os.path.join(d, n), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.write(fd, BLOCK)
        os.close(fd)


def stat(d, names):
    for n in names:
        if os.stat(os.path.join(d, n)).st_size != len(BLOCK):
            raise SystemExit(f"{d}/{n}: wrong size")


def unlink(d, names):
    for n in names:
        os.unlink(os.path.join(d, n))


def timed(fn, *args):
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def parallel_create(d, names, writers, own_dirs=False):
    parts = [names[i::writers] for i in range(writers)]
    dirs = [d] * writers
    if own_dirs:
        dirs = [os.path.join(d, f"w{i}") for i in range(writers)]
        for w in dirs:
            os.mkdir(w)
    ctx = mp.get_context("fork")
    t0 = time.perf_counter()
    procs = [ctx.Process(target=create, args=(w, p)) for w, p in zip(dirs, parts)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a writer in {d} failed")
    dt = time.perf_counter() - t0
    if own_dirs:
        for w, p in zip(dirs, parts):
            unlink(w, p)
            os.rmdir(w)
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("dirs", nargs="+", help="NAME=DIR")
    a = ap.parse_args()
    systems = [s.split("=", 1) for s in a.dirs]
    names = [f"f{i:06d}" for i in range(a.files)]
    times = {n: {p: [] for p in ("create", "stat", "unlink", "create_parallel", "create_parallel_dirs")} for n, _ in systems}
    for r in range(a.rounds):
        for name, base in systems:
            d = os.path.join(base, f"smallfiles-{os.getpid()}-{r}")
            os.mkdir(d)
            t = times[name]
            t["create"].append(timed(create, d, names))
            t["stat"].append(timed(stat, d, names))
            t["unlink"].append(timed(unlink, d, names))
            t["create_parallel"].append(parallel_create(d, names, a.writers))
            unlink(d, names)
            t["create_parallel_dirs"].append(parallel_create(d, names, a.writers, own_dirs=True))
            os.rmdir(d)
    first = systems[0][0]
    out = {"files": a.files, "rounds": a.rounds, "writers": a.writers, "systems": {}}
    for name, _ in systems:
        s = {}
        for phase, ts in times[name].items():
            s[phase] = {"median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts)}
            s[phase]["x_" + first] = statistics.median(ts) / statistics.median(times[first][phase])
        for phase in ("create_parallel", "create_parallel_dirs"):
            s[phase]["creates_per_s"] = a.files / s[phase]["median_s"]
        out["systems"][name] = s
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
