"""PyTorch adapters: an IterableDataset of dicts of tensors, and a
DataLoader wrapper that checkpoints it.

    ds = sluice.torch.IterableDataset("mnist", batch_size=64, seed=0)
    loader = sluice.torch.DataLoader(ds)
    for batch in loader:
        x, y = batch["image"], batch["label"]             # tensors
    torch.save(loader.state_dict(), "ckpt")

Where the work runs. Reading needs no worker process: the loader's readers
are threads of libsluice, so without a ``transform`` every batch is read
and handed over in the calling process, with no copy, and ``num_workers``
starts no process. A ``transform`` (a function of a batch's dict of
tensors, for decoding or augmentation) runs in ``num_workers`` worker
processes (``forkserver`` by default, with torch, pyarrow and sluice
imported before the fork, so workers start in a fraction of a second).
Without options for torch's own DataLoader (collate_fn, pin_memory, ...;
timeout is kept) the workers are this module's (_Pool), which skips
torch's per-batch queues and threads.
Workers live as long as their DataLoader and keep their connection and
loader across epochs; each iteration tells them its epoch (``set_epoch``)
or the state to resume from. Each worker reads every num_workers-th step of its rank with its own
loader, and the memory budget (``prefetch_bytes``, default 256 MiB) is
split evenly between them, so a rank holds one budget in all. A worker's
batch memory is a memfd the training process maps: tensors that are views
of a batch (what to_tensors gives, and what a transform passes through)
reach the training process with no copy, and the worker reuses their
memory once the last of them is freed there; tensors a transform makes
travel torch's usual way (``zero_copy=False`` sends everything that way).
A worker runs ahead two batches, or, when batches are small against its
budget, up to a quarter of it (16 batches at most). Workers ignore Ctrl-C:
the training process takes it, and its workers survive for the next
iteration.

``rank`` and ``world_size`` default to torch.distributed's when it is
initialised (when the dataset is made, or at the latest when iteration
starts in the training process), else to 0 and 1.

Fixed-width columns become 1-D tensors; fixed_size_list<T>[N] columns
(embeddings) 2-D tensors of T, one row of N per sample, and
fixed_size_binary[N] 2-D uint8 tensors. A variable-length column ``c``
becomes ``batch[c]`` (uint8 values, all samples' bytes end to end; for
list<T> and large_list<T>, T elements) and ``batch[c + "_offsets"]``
(int64, sample i is values[off[i]:off[i+1]]).
Tensors share the batch's memory (no copy in the process that reads);
the batch's memory returns to the loader when its tensors are freed.
"""
import contextlib
import json
import mmap
import multiprocessing
import os
import secrets
import socket
import struct
import tempfile
import threading
import warnings
import weakref

import numpy as np
import pyarrow as pa
import torch
import torch.utils.data

import sluice
from sluice import _lib

# Keys of what a worker sends the training process for each batch.
_STATE, _BATCH, _SHARED = "__sluice_state__", "__sluice_batch__", "__sluice_shared__"
_DEFAULT_PREFETCH = 256 << 20  # the Go loader's default budget

# torch.from_numpy warns once per process that the Arrow memory is read
# only (it is: batches are immutable); the first conversion silences that.
_warned = False


@contextlib.contextmanager
def _read_only_ok():
    global _warned
    if _warned:
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*")
        yield
    _warned = True


def to_tensors(batch):
    """A pyarrow.RecordBatch as a dict of torch tensors (no copy)."""
    with _read_only_ok():
        return _to_tensors(batch)


def _to_tensors(batch):
    out = {}
    for name, col in zip(batch.schema.names, batch.columns):
        if pa.types.is_fixed_size_list(col.type):
            values = col.flatten().to_numpy(zero_copy_only=True)  # the batch's rows only
            out[name] = torch.from_numpy(values.reshape(len(col), col.type.list_size))
        elif pa.types.is_fixed_size_binary(col.type):
            w = col.type.byte_width
            values = np.frombuffer(col.buffers()[1], dtype=np.uint8)[col.offset * w: (col.offset + len(col)) * w]
            out[name] = torch.from_numpy(values.reshape(len(col), w))
        elif pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            offs = col.offsets.to_numpy(zero_copy_only=True)
            out[name] = torch.from_numpy(col.flatten().to_numpy(zero_copy_only=True))
            out[name + "_offsets"] = torch.from_numpy(offs.astype(np.int64) - int(offs[0]))
        elif pa.types.is_binary(col.type) or pa.types.is_string(col.type):
            bufs = col.buffers()
            offs = np.frombuffer(bufs[1], dtype=np.int32)[col.offset: col.offset + len(col) + 1]
            start, end = int(offs[0]), int(offs[-1])
            values = np.frombuffer(bufs[2], dtype=np.uint8)[start:end] if bufs[2] is not None else np.empty(0, np.uint8)
            out[name] = torch.from_numpy(values)
            out[name + "_offsets"] = torch.from_numpy(offs.astype(np.int64) - start)
        else:
            out[name] = torch.from_numpy(col.to_numpy(zero_copy_only=True))
    return out


def _distributed():
    """torch.distributed's (rank, world size), or None when it is not
    initialised in this process."""
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


class IterableDataset(torch.utils.data.IterableDataset):
    """One rank's batches of a Sluice dataset as dicts of tensors.

    Picklable: it holds the cluster address, token and options, and opens
    the dataset lazily in whichever process iterates it (and keeps it open
    there across epochs). ``transform``, when given, maps each batch's dict
    of tensors to what the training loop receives.
    """

    def __init__(self, name, batch_size, shuffle=True, seed=0, epoch=0, rank=None, world_size=None,
                 columns=None, drop_last=False, transform=None, cluster=None, token=None, **options):
        super().__init__()
        self.name = name
        self.cluster = cluster or os.environ.get("SLUICE_CLUSTER", "")
        self.token = token or os.environ.get("SLUICE_TOKEN", "")
        self.transform = transform
        self.options = dict(batch_size=batch_size, shuffle=shuffle, seed=seed, rank=rank,
                            world_size=world_size, columns=columns, drop_last=drop_last, **options)
        self._resolve_ranks()
        self.epoch = epoch
        self._start = None  # a state to resume from, else the epoch's start
        self._state = None  # the state after the last batch delivered (from workers: JSON text)
        self._open = None   # (pid, client, dataset, loader) of this process
        self._gen = None    # the iteration in progress in this process
        self._handoff = None  # DataLoader's socket for workers' batch memory (zero copy)
        self._control = None  # DataLoader's file telling persistent workers where to start

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_open"] = state["_gen"] = None  # a worker opens its own
        return state

    def _resolve_ranks(self):
        """Takes rank and world size left unset from torch.distributed, when
        it is initialised here."""
        if self.options["rank"] is not None and self.options["world_size"] is not None:
            return
        dist = _distributed()
        if dist is None:
            return
        if self.options["rank"] is None:
            self.options["rank"] = dist[0]
        if self.options["world_size"] is None:
            self.options["world_size"] = dist[1]

    def set_epoch(self, epoch):
        self.epoch = epoch
        self._start = None
        self._state = None

    def state_dict(self):
        if isinstance(self._state, str):  # a worker's, parsed only when asked for
            return json.loads(self._state)
        if self._state is not None:
            return dict(self._state)
        live = self._live_loader()
        if live is not None:
            return live.state_dict()
        if self._start is not None:
            return dict(self._start)
        return {"epoch": self.epoch, "consumed": 0, "fresh": True}

    def load_state_dict(self, state):
        self._close_iteration()
        self._state = None
        if state.get("fresh"):
            self.set_epoch(state["epoch"])
            return
        self._start = dict(state)
        self.epoch = state["epoch"]

    def _live_loader(self):
        """This process's loader while an iteration runs here."""
        if self._gen is None or self._open is None or self._open[0] != os.getpid():
            return None
        return self._open[3]

    def _close_iteration(self):
        gen, self._gen = self._gen, None
        if gen is not None and self._open is not None and self._open[0] == os.getpid():
            gen.close()

    def _loader(self, worker, workers):
        """This process's loader, positioned at the start of this iteration."""
        if self._open is None or self._open[0] != os.getpid():
            opts = {k: v for k, v in self.options.items() if v is not None}
            if workers > 1:
                budget = opts.pop("prefetch_bytes", None) or _DEFAULT_PREFETCH
                opts["prefetch_bytes"] = max(1, budget // workers)
            if self._handoff and torch.utils.data.get_worker_info() is not None:
                opts["shared_memory"] = True
            client = sluice.Client(self.cluster, self.token)
            ds = sluice.Dataset(self.name, client=client)
            loader = ds.loader(epoch=self.epoch, worker=worker, workers=workers, **opts)
            self._open = (os.getpid(), client, ds, loader)
        loader = self._open[3]
        if self._start is not None:
            loader.load_state_dict(self._start)
        else:
            loader.set_epoch(self.epoch)
        return loader

    def _batches(self, worker, workers, with_state):
        loader = self._loader(worker, workers)
        handoff = _Handoff.of(loader, self._handoff) if with_state and self._handoff else None
        try:
            for batch in loader:
                out = to_tensors(batch)
                if self.transform is not None:
                    out = self.transform(out)
                if handoff is not None:
                    out = handoff.send(batch, out, loader._state_json())
                elif with_state and isinstance(out, dict):
                    out[_STATE] = loader._state_json()
                yield out
        finally:
            if not with_state:  # the state once this iteration is over
                self._state = loader.state_dict()

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is not None:  # a DataLoader worker: states travel with the batches
            if self._control is not None:  # where this iteration starts
                with open(self._control) as f:
                    start = json.load(f)
                self.epoch, self._start = start["epoch"], start["start"]
            yield from self._batches(info.id, info.num_workers, True)
            return
        self._close_iteration()
        self._resolve_ranks()
        self._state = None
        self._gen = self._batches(0, 1, False)
        yield from self._gen

    def close(self):
        """Closes this process's connection (it reopens on the next iteration)."""
        self._close_iteration()
        live, self._open = self._open, None
        if live is not None and live[0] == os.getpid():
            for h in (live[3], live[2], live[1]):
                h.close()


class _Handoff:
    """A worker's side of handing batches to the training process with no
    copy. Its loader's batches lie in a memfd, which it first sends to the
    training process's socket (SCM_RIGHTS: the descriptor stays good there
    even once this worker has exited). For each tensor that is a view of
    the memfd, the worker then sends where it lies instead of the bytes,
    and keeps the batch until the training process says (by a datagram to
    this worker's socket) that the last of those tensors is gone."""

    _by_pid = {}

    @classmethod
    def of(cls, loader, main):
        h = cls._by_pid.get(os.getpid())
        if h is None or h.loader is not loader:
            h = cls._by_pid[os.getpid()] = cls(loader, main)
        return h

    def __init__(self, loader, main):
        self.loader = loader
        self.fd, self.base, self.size = loader.shared_memory()
        self.pid = os.getpid()
        self.name = "\0sluice-torch-%d-%s" % (self.pid, secrets.token_hex(6))
        self.held = {}
        self.lock = threading.Lock()
        self.seq = 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.name)
        # (socket.send_fds drops its address argument before Python 3.12.)
        self.sock.sendmsg([struct.pack("<qq", self.pid, self.fd)],
                          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", self.fd))], 0, main)
        threading.Thread(target=self._released, name="sluice-handoff", daemon=True).start()

    def _released(self):
        while True:
            self._forget(self.sock.recv(8 * 1024))

    def _forget(self, data):
        with self.lock:
            for (seq,) in struct.iter_unpack("<q", data[: len(data) // 8 * 8]):
                self.held.pop(seq, None)

    def drain(self):
        """Takes the releases already queued now, in this thread (the
        release thread may not have run yet): a _Pool worker does before each
        iteration, which the training process starts only after telling it
        of every batch it freed or dropped."""
        while True:
            try:
                data = self.sock.recv(8 * 1024, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            self._forget(data)

    def send(self, batch, out, state):
        if not isinstance(out, dict):
            return {_BATCH: out, _SHARED: None, _STATE: state}
        plain, shared = {}, {}
        for k, v in out.items():
            if isinstance(v, torch.Tensor) and v.device.type == "cpu":
                n, p = _nbytes(v), v.data_ptr()
                if v.is_contiguous() and n > 0 and self.base <= p and p + n <= self.base + self.size:
                    shared[k] = (p - self.base, n, v.dtype, tuple(v.shape))
                    continue
                if n <= _INLINE:
                    plain[k] = _Inline(v)  # pickled with the message: cheaper than a shared segment
                    continue
            plain[k] = v
        if not shared:
            return {_BATCH: plain, _SHARED: None, _STATE: state}
        self.seq += 1
        with self.lock:
            self.held[self.seq] = batch
        return {_BATCH: plain, _SHARED: (self.pid, self.fd, self.name, self.seq, shared), _STATE: state}


# Tensors up to this size that are not views of the loader's memory
# (offsets rebased by to_tensors, small tensors a transform makes) travel
# inside the message, not through torch's shared memory.
_INLINE = 64 << 10


class _Inline:
    """A small tensor's bytes, pickled by value (torch would move it
    through a shared memory segment of its own)."""

    __slots__ = ("data", "dtype", "shape")

    def __init__(self, t):
        self.data, self.dtype, self.shape = t.numpy().tobytes(), t.dtype, tuple(t.shape)

    def tensor(self):
        if not self.data:
            return torch.empty(self.shape, dtype=self.dtype)
        return torch.frombuffer(bytearray(self.data), dtype=self.dtype).reshape(self.shape)


def _shared_bytes(shared):
    """The bytes of a batch's tensors that are views of a worker's memory
    (_Handoff.send's shared: name -> (offset, bytes, dtype, shape))."""
    return sum(n for _, n, _, _ in shared.values())


def _nbytes(t):
    return t.numel() * t.element_size()


_release_sock = None


def _release(name, *seqs):
    """Tells a worker that the training process is done with batches."""
    global _release_sock
    try:
        if _release_sock is None:
            _release_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        for i in range(0, len(seqs), _RELEASE_MAX):  # what the worker's recv takes
            part = seqs[i:i + _RELEASE_MAX]
            _release_sock.sendto(struct.pack("<%dq" % len(part), *part), name)
    except OSError:
        pass  # the worker is gone, and its memory with it


_RELEASE_MAX = 1024  # sequence numbers in one datagram (8 KiB)


class _Receiver:
    """The training process's side: a socket workers send their memfds to,
    each mapped once, and tensors made over them."""

    # How long to wait for a worker's memfd, which it sends before its
    # first batch (so it is normally there already).
    _FD_WAIT = 60.0

    # Freed batches a worker is told about together, unless they hold a
    # quarter of its budget (then at once), or the training process is
    # about to wait for a batch (flush): one datagram per batch woke a worker
    # and cost a tenth of the training process's time at 4 KiB samples.
    _RELEASE_EVERY = 8

    def __init__(self, worker_budget=0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.name = "\0sluice-torch-main-%d-%s" % (os.getpid(), secrets.token_hex(6))
        self.sock.bind(self.name)
        self.sock.settimeout(self._FD_WAIT)
        self.fds = {}   # (pid, fd in the worker) -> fd here, received, not yet mapped
        self.maps = {}  # (pid, fd in the worker) -> mmap
        self.release_bytes = worker_budget // 4
        self.lock = threading.Lock()  # finalizers may run in any thread
        self.pending = {}  # worker's socket name -> ([seq], bytes) freed here, not yet told

    def _freed(self, name, seq, nbytes):
        with self.lock:
            seqs, held = self.pending.get(name) or ([], 0)
            seqs.append(seq)
            self.pending[name] = (seqs, held + nbytes)
            now = len(seqs) >= self._RELEASE_EVERY or held + nbytes >= self.release_bytes
            if now:
                del self.pending[name]
        if now:
            _release(name, *seqs)

    def flush(self):
        """Tells every worker about the batches freed here so far."""
        with self.lock:
            pending, self.pending = self.pending, {}
        for name, (seqs, _) in pending.items():
            _release(name, *seqs)

    def _map(self, key):
        while key not in self.fds:
            try:
                msg, fds, _, _ = socket.recv_fds(self.sock, 16, 1)
            except socket.timeout:
                raise sluice.SluiceError("sluice.torch: worker %d never sent its batch memory" % key[0]) from None
            if len(msg) == 16 and len(fds) == 1:
                self.fds[struct.unpack("<qq", msg)] = fds[0]
            else:
                for fd in fds:
                    os.close(fd)
        fd = self.fds.pop(key)
        try:
            mm = mmap.mmap(fd, os.fstat(fd).st_size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        self.maps[key] = mm
        return mm

    def receive(self, item):
        out = item[_BATCH]
        if isinstance(out, dict):
            out = {k: v.tensor() if isinstance(v, _Inline) else v for k, v in out.items()}
        meta = item[_SHARED]
        if meta is None:
            return out
        pid, fd, name, seq, shared = meta
        mm = self.maps.get((pid, fd)) or self._map((pid, fd))
        # Every tensor of this batch is a view of base, which the worker is
        # told about once the last of them is gone.
        base = np.frombuffer(mm, dtype=np.uint8)
        weakref.finalize(base, self._freed, name, seq, _shared_bytes(shared))
        with _read_only_ok():
            for k, (off, n, dtype, shape) in shared.items():
                out[k] = torch.from_numpy(base[off: off + n]).view(dtype).reshape(shape)
        return out

    def forget_exited(self):
        """Drops this side's reference to the memory of workers that have
        exited (it is unmapped once their last tensor here is freed)."""
        for key in list(self.maps):
            try:
                os.kill(key[0], 0)
            except ProcessLookupError:
                del self.maps[key]

    def close(self):
        self.flush()
        self.sock.close()
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _remove(path):
    try:
        os.unlink(path)
    except OSError:
        pass


# The modules a forkserver imports once, so that each worker it forks
# starts with them loaded (libsluice itself loads lazily, in the worker).
_PRELOAD = ["__main__", "numpy", "pyarrow", "torch", "sluice", "sluice.torch"]


def _worker_context(name):
    ctx = multiprocessing.get_context(name)
    if name == "forkserver":
        ctx.set_forkserver_preload(_PRELOAD)
    return ctx


class _Pool:
    """Persistent transform workers without torch's DataLoader machinery.

    Torch's multiprocessing loader costs the training process an index
    queue, a feeder thread, profiler records and lock hand-offs for every
    batch: at small batches that was half of its time. Batches come whole
    from an IterableDataset, so none of it is needed: each worker streams
    its steps (every num_workers-th, as in torch) over its own pipe, the
    training process takes them in step order, and a worker running ahead
    is held back by its loader's memory budget. Workers are seeded and see
    get_worker_info() as torch's persistent workers do; a worker's error is
    raised in the training process with its traceback, and a worker that
    dies is reported, never waited for.

    How far a worker may run ahead is counted in batches (credit), sent to
    it as the training process takes its batches: _PREFETCH batches, or
    more when batches are small, up to a quarter of the worker's memory
    budget (window_bytes) and _MAX_AHEAD batches. Credit then goes in
    groups, half a window at a time, so small batches do not cost a message
    each way (at 4 KiB samples that was a tenth of the training process's
    time)."""

    def __init__(self, dataset, n, ctx, timeout, before_wait, window_bytes):
        self.dataset, self.n, self.ctx, self.timeout = dataset, n, ctx, timeout
        self.before_wait = before_wait  # tells workers of memory freed here, which they may be waiting for
        self.window_bytes = window_bytes
        self.procs, self.conns = [], []
        self.live = []  # workers still in the iteration in progress

    def _start(self):
        if self.procs and all(p.is_alive() for p in self.procs):
            return
        self.close()
        base = int(torch.empty((), dtype=torch.int64).random_().item())
        for i in range(self.n):
            mine, theirs = self.ctx.Pipe()
            p = self.ctx.Process(target=_pool_worker, args=(self.dataset, i, self.n, base, theirs), daemon=True)
            p.start()
            theirs.close()  # so that a worker's death reads as the end of its pipe
            self.procs.append(p)
            self.conns.append(mine)

    def _recv(self, w):
        conn, proc = self.conns[w], self.procs[w]
        if not conn.poll():
            self.before_wait()
        waited = 0.0
        while not conn.poll(1.0):
            waited += 1.0
            if not proc.is_alive():
                raise self._exited(w)
            if self.timeout and waited >= self.timeout:
                raise sluice.SluiceError("sluice.torch: worker %d gave no batch in %g s" % (w, self.timeout))
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            proc.join(1.0)
            raise self._exited(w) from None
        if msg[0] == "error":
            _, typ, text = msg
            try:
                err = typ(text)
            except Exception:
                err = RuntimeError(text)
            raise err
        return msg

    def _exited(self, w):
        proc = self.procs[w]
        return sluice.SluiceError("sluice.torch: worker %d (pid %d) exited unexpectedly (exit code %s)"
                                  % (w, proc.pid, proc.exitcode))

    def epoch(self):
        """This iteration's items, in step order."""
        self._stop(self.live)  # an iteration left unfinished, its generator not closed
        self._start()
        self.before_wait()
        for c in self.conns:
            c.send(("start",))
        active = self.live = list(range(self.n))
        ahead = [_PREFETCH] * self.n  # batches each worker may make or send before it hears from here
        try:
            while active:
                for w in list(active):
                    msg = self._recv(w)
                    if msg[0] == "end":
                        active.remove(w)
                        continue
                    ahead[w] -= 1
                    window = self._window(msg[1])
                    if ahead[w] <= window // 2:  # room for more batches from w
                        self.conns[w].send(("more", window - ahead[w]))
                        ahead[w] = window
                    yield msg[1]
        finally:
            self._stop(active)

    def _window(self, item):
        """How many batches like item a worker may run ahead."""
        meta = item.get(_SHARED) if isinstance(item, dict) else None
        if meta is None:
            return _PREFETCH
        return max(_PREFETCH, min(_MAX_AHEAD, self.window_bytes // max(1, _shared_bytes(meta[4]))))

    def _stop(self, active):
        """Tells workers still in this iteration to leave it, and waits
        until each has (its last batches are dropped)."""
        for w in active:
            try:
                self.conns[w].send(("stop",))
            except OSError:
                pass
        for w in active:
            try:
                while True:
                    msg = self._recv(w)
                    if msg[0] == "end":
                        break
                    _drop(msg[1])
            except Exception:  # a dead or failing worker: start afresh next time
                self.close()
                return
        active.clear()

    def close(self):
        for c in self.conns:
            try:
                c.send(("exit",))
            except OSError:
                pass
            c.close()
        for p in self.procs:
            p.join(2.0)
            if p.is_alive():
                p.terminate()
                p.join()
        self.live.clear()  # an unfinished iteration's, which has nothing left to stop
        self.procs, self.conns, self.live = [], [], []


def _drop(item):
    """Gives a worker back the memory of a batch the training process will
    never take."""
    meta = item.get(_SHARED) if isinstance(item, dict) else None
    if meta is not None:
        _release(meta[2], meta[3])


# Batches a _Pool worker makes or sends ahead of the training process
# (torch's prefetch_factor): what it has sent is held until taken, so the
# loader's budget bounds the rest of its read-ahead. Small batches may run
# further ahead, within a quarter of the budget (_Pool).
_PREFETCH = 2
_MAX_AHEAD = 16
_END = object()


def _pool_worker(dataset, worker, workers, base_seed, conn):
    """A _Pool worker: seeded and known to torch as its DataLoader workers
    are; runs one iteration of dataset per "start", until "exit" or the
    training process is gone."""
    import random

    from torch.utils.data._utils import worker as torch_worker

    torch.set_num_threads(1)
    # libsluice's Go code runs on one thread here too (unless GOMAXPROCS
    # says otherwise): the workers are the parallelism, and the runtime's
    # extra threads only add wake-ups around each call (at 4 KiB, workers
    # ÷ the plain loader 0.89-0.90 against 0.86-0.87 with two).
    if not os.environ.get("GOMAXPROCS"):
        _lib.call("sluice_procs", 1)
    # Ctrl-C is the training process's: it stops its workers (or its end
    # closes their pipes), so their calls need not be interruptible.
    _lib.uninterruptible()
    seed = base_seed + worker
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed % (1 << 32))
    torch_worker._worker_info = torch_worker.WorkerInfo(id=worker, num_workers=workers, seed=seed, dataset=dataset)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if msg[0] == "exit":
            return
        if msg[0] != "start":
            continue  # a "stop" for an iteration this worker had finished
        handoff = _Handoff._by_pid.get(os.getpid())
        if handoff is not None:
            handoff.drain()  # memory the last iteration left to the training process
        it = iter(dataset)
        credits = _PREFETCH  # batches being made or sent and not yet taken, at most
        made = 0
        try:
            while True:
                stop = False
                # Messages are looked for when credit runs low, and every
                # few batches: a "stop" may wait that long, and the batches
                # made meanwhile are dropped (_Pool._stop).
                made += 1
                while not stop and (credits == 0 or ((credits <= _PREFETCH or made % 4 == 0) and conn.poll())):
                    msg = conn.recv()
                    if msg[0] == "more":
                        credits += msg[1]
                    else:  # "stop": the training process left this iteration
                        stop = True
                if stop:
                    break
                item = next(it, _END)
                if item is _END:
                    break
                conn.send(("batch", item))
                credits -= 1
            it.close()
            conn.send(("end",))
        except (BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
            return
        except BaseException as e:  # noqa: B036 - reaches the training process
            import traceback

            text = "sluice.torch: worker %d: %s" % (worker, traceback.format_exc())
            try:
                try:
                    conn.send(("error", type(e), text))  # raised as its own type, as torch does
                except Exception:
                    conn.send(("error", RuntimeError, text))
                conn.send(("end",))
            except OSError:
                return


class DataLoader:
    """torch.utils.data.DataLoader over an IterableDataset, with
    batch_size=None (batches come whole), state_dict / load_state_dict for
    checkpoints, and worker processes only for a dataset's transform
    (persistent; forkserver by default, spawn works too; fork is refused,
    as libsluice does not survive it). zero_copy=False has torch copy
    workers' batches instead of mapping their memory."""

    def __init__(self, dataset, num_workers=0, multiprocessing_context="forkserver", zero_copy=True, **kw):
        self.dataset = dataset
        budget = (dataset.options.get("prefetch_bytes") or _DEFAULT_PREFETCH) // max(1, num_workers)
        self._receiver = _Receiver(budget) if zero_copy and num_workers > 0 and dataset.transform is not None else None
        dataset._handoff = self._receiver.name if self._receiver else None
        if dataset.transform is None:
            num_workers = 0  # reading needs no process: see the module's doc
        if num_workers == 0:
            multiprocessing_context = None
        elif isinstance(multiprocessing_context, str):
            if multiprocessing_context == "fork":
                raise ValueError("sluice.torch.DataLoader: fork workers cannot use libsluice; use forkserver or spawn")
            multiprocessing_context = _worker_context(multiprocessing_context)
        self.num_workers = num_workers
        # No pin_memory, collate_fn, ...: nothing for torch's loader to do,
        # so its per-batch machinery is skipped (timeout is honoured here).
        self._plain = not (set(kw) - {"timeout"})
        self._pool = None
        if num_workers > 0:
            # Workers live as long as this loader (connection, loader and
            # batch memory kept); each iteration they read where to start
            # from this file, written just before it.
            fd, dataset._control = tempfile.mkstemp(prefix="sluice-torch-", suffix=".json")
            os.close(fd)
            weakref.finalize(self, _remove, dataset._control)
            kw["persistent_workers"] = True
            if self._plain:
                ctx = multiprocessing_context or _worker_context("forkserver")
                flush = self._receiver.flush if self._receiver else (lambda: None)
                self._pool = _Pool(dataset, num_workers, ctx, kw.get("timeout") or 0, flush, budget // 4)
                weakref.finalize(self, self._pool.close)
        self._dl = None if self._pool else torch.utils.data.DataLoader(
            dataset, batch_size=None, num_workers=num_workers, multiprocessing_context=multiprocessing_context, **kw)

    def __iter__(self):
        self.dataset._resolve_ranks()  # before workers take a copy of it
        if self.num_workers == 0:
            # Batches come whole and need no collation: without options
            # for torch's loader, its per-batch machinery is skipped.
            yield from (self.dataset if self._plain else self._dl)
            return
        path = self.dataset._control
        with open(path + ".new", "w") as f:
            json.dump({"epoch": self.dataset.epoch, "start": self.dataset._start}, f)
        os.replace(path + ".new", path)
        receiver = self._receiver
        items = self._pool.epoch() if self._pool else iter(self._dl)
        try:
            while True:
                if receiver is not None and self._pool is None:
                    receiver.flush()  # torch's loader may wait for memory freed here
                try:
                    item = next(items)
                except StopIteration:
                    break
                if isinstance(item, dict):
                    state = item.pop(_STATE, None)
                    if state is not None:
                        self.dataset._state = state
                    if _BATCH in item:  # a worker's hand-over message
                        item = receiver.receive(item)
                yield item
        finally:
            if self._pool is not None:
                items.close()
            if receiver is not None:
                receiver.forget_exited()

    def state_dict(self):
        return self.dataset.state_dict()

    def load_state_dict(self, state):
        self.dataset.load_state_dict(state)
