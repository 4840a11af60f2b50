"""Random 4 KiB reads through POSIX, as fio measures them: one file per
directory given, read at random aligned offsets with O_DIRECT (so the
kernel's page cache answers none of them), by 1 and by 4 jobs, each a
process of its own reading one block at a time (fio's psync engine),
interleaved rounds, medians.

    python3 benchmarks/randread.py [--size-mib 1024] [--seconds 15]
        [--rounds 2] [--jobs 1,4] NAME=DIR [NAME=DIR ...]

Each directory gets a file of --size-mib random bytes written through it
(1 MiB writes, fsync) before the first round. Each round runs every job
count on every directory before the next round, so a slow spell on this
shared machine hits every system alike. Prints one JSON object: IOPS per
job count per system (median and range) and each system's ratio to the
first one named. Needs fio (apt-get install fio).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess


def write_file(path, size):
    block = bytearray(os.urandom(1 << 20))
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644)
    try:
        for i in range(size >> 20):
            block[:8] = i.to_bytes(8, "little")  # no two blocks alike
            os.write(fd, block)
        os.fsync(fd)
    finally:
        os.close(fd)


def fio(path, jobs, seconds):
    out = subprocess.run(
        ["fio", "--name=randread", f"--filename={path}", "--rw=randread", "--bs=4k",
         "--direct=1", "--ioengine=psync", f"--numjobs={jobs}", "--group_reporting",
         "--time_based", f"--runtime={seconds}", "--output-format=json"],
        check=True, capture_output=True, text=True).stdout
    job = json.loads(out)["jobs"][0]
    if job["error"]:
        raise SystemExit(f"fio on {path}: error {job['error']}")
    return job["read"]["iops"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--jobs", default="1,4")
    ap.add_argument("dirs", nargs="+", help="NAME=DIR")
    a = ap.parse_args()
    if shutil.which("fio") is None:
        raise SystemExit("fio is not installed (apt-get install fio)")
    systems = [s.split("=", 1) for s in a.dirs]
    jobs = [int(j) for j in a.jobs.split(",")]
    files = {}
    for name, d in systems:
        files[name] = os.path.join(d, f"randread-{name}-{os.getpid()}")
        write_file(files[name], a.size_mib << 20)
    iops = {n: {j: [] for j in jobs} for n, _ in systems}
    try:
        for _ in range(a.rounds):
            for j in jobs:
                for name, _ in systems:
                    iops[name][j].append(fio(files[name], j, a.seconds))
    finally:
        for f in files.values():
            os.unlink(f)
    first = systems[0][0]
    result = {"size_mib": a.size_mib, "seconds": a.seconds, "rounds": a.rounds, "systems": {}}
    for name, _ in systems:
        result["systems"][name] = {
            f"jobs={j}": {
                "iops_median": round(statistics.median(v)),
                "iops_range": [round(min(v)), round(max(v))],
                f"x_{first}": round(statistics.median(v) / statistics.median(iops[first][j]), 2),
            } for j, v in iops[name].items()}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
