"""`sluice dev` for the benchmark scripts: start it and read its exports."""
import os
import re
import subprocess

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SLUICE = os.path.join(REPO, "bin", "sluice")


def start(directory, *flags):
    """Starts `sluice dev --dir directory` with flags; returns the process
    and its exports (SLUICE_CLUSTER, SLUICE_TOKEN, SLUICE_AGENT, and
    SLUICE_FLIGHT with --flight), once all are printed, and sets them in
    os.environ, all but SLUICE_AGENT (a benchmark names its path)."""
    dev = subprocess.Popen([SLUICE, "dev", "--dir", directory, "--listen", "127.0.0.1:0", *flags],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    want = 4 if "--flight" in flags else 3
    env = {}
    while len(env) < want:
        line = dev.stdout.readline()
        if not line:
            raise SystemExit("sluice dev exited before printing its exports")
        m = re.match(r"export (SLUICE_\w+)=(\S+)", line)
        if m:
            env[m.group(1)] = m.group(2)
    os.environ.update({k: v for k, v in env.items() if k != "SLUICE_AGENT"})
    return dev, env
