"""Sluice for Python: training batches from a Sluice cluster as pyarrow
record batches (zero copy, through the Arrow C stream interface) or torch
tensors (``sluice.torch``), plus raw file reads and writes.

    import sluice
    ds = sluice.Dataset("imagenet")            # SLUICE_CLUSTER / SLUICE_TOKEN
    loader = ds.loader(batch_size=256, shuffle=True, seed=0)
    for batch in loader:                       # pyarrow.RecordBatch
        ...
    ckpt = loader.state_dict()                 # resume exactly later

The native library (libsluice.so) is loaded on first use, never at import,
and refuses to run in a process forked after it was loaded: use the
``spawn`` or ``forkserver`` start methods.
"""
import ctypes
import json
import os
import threading

import pyarrow as pa

from . import _lib
from ._lib import SluiceError

__all__ = ["connect", "Client", "Dataset", "Loader", "File", "SluiceError", "metrics", "version"]

# Sizes of the Arrow C data interface structs (fixed by the ABI).
_ARROW_SCHEMA, _ARROW_ARRAY, _ARROW_STREAM = 72, 80, 40


def version():
    """libsluice's version."""
    return _lib.lib().sluice_version().decode()


class _Handle:
    """An object of libsluice's, closed once, and only by the process that
    made it (a forked child must not call into the library)."""

    _h = None

    def _own(self, h):
        self._h, self._pid = h, os.getpid()

    def handle(self):
        if self._h is None:
            raise SluiceError("%s is closed" % type(self).__name__)
        return self._h

    def close(self):
        if self._h is not None and self._pid == os.getpid():
            _lib.close(self._h)
        self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Client(_Handle):
    """A connection to a cluster. Prefer ``sluice.connect``.

    cluster and token default to SLUICE_CLUSTER and SLUICE_TOKEN as they
    are when the client is made. op_timeout (seconds) bounds every call:
    None takes SLUICE_OP_TIMEOUT (seconds, or 500ms / 30s / 2m), else 30 s;
    0 means none. A cluster that does not answer raises SluiceError within
    it; connecting to an address where nothing listens raises within a few
    seconds. Ctrl-C interrupts a call with KeyboardInterrupt.
    """

    def __init__(self, cluster=None, token=None, op_timeout=None):
        self.cluster = cluster or os.environ.get("SLUICE_CLUSTER", "")
        self.token = token or os.environ.get("SLUICE_TOKEN", "")
        if not self.cluster or not self.token:
            raise SluiceError("sluice: no cluster or token (pass them, or set SLUICE_CLUSTER and SLUICE_TOKEN)")
        self._own(_lib.handle_out("sluice_connect", self.cluster.encode(), self.token.encode(),
                                  _lib.op_timeout_ns(op_timeout)))

    def dataset(self, name):
        return Dataset(name, client=self)

    def open(self, path, mode="r"):
        """Opens a file: mode "r" reads, "w" creates a new file to write."""
        if mode not in ("r", "w"):
            raise ValueError("mode must be 'r' or 'w'")
        return File(self, path, mode == "w")

    def metrics(self):
        """The client's metrics as a dict of name to value, labels in
        braces as Prometheus writes them: bytes and ranges read and
        written, retries, errors by kind, and its loaders' batches,
        samples, stall seconds (time spent waiting in the loader for a
        batch: the training loop starved of data) and memory-wait seconds
        (time the read-ahead waited for batches to be released)."""
        return _lib.json_out("sluice_metrics", ctypes.c_uint64(self.handle()))

    def stat(self, path):
        """The file's attributes as a dict (ino, type, mode, size, nlink, mtime_ns, uid, gid)."""
        return _lib.json_out("sluice_stat", ctypes.c_uint64(self.handle()), path.encode())


_default = None
_default_lock = threading.Lock()


def connect(cluster=None, token=None, op_timeout=None):
    """Connects to a cluster (defaults from SLUICE_CLUSTER and SLUICE_TOKEN;
    op_timeout as for Client) and makes it the default connection."""
    global _default, _default_env
    with _default_lock:
        _default, _default_env = Client(cluster, token, op_timeout), None
        return _default


# The environment the default client was made from, when it was made from
# it (not by connect): a change of SLUICE_CLUSTER, SLUICE_TOKEN or
# SLUICE_OP_TIMEOUT since makes a new one.
_default_env = None


def _env():
    return tuple(os.environ.get(k, "") for k in ("SLUICE_CLUSTER", "SLUICE_TOKEN", "SLUICE_OP_TIMEOUT"))


def _client():
    global _default, _default_env
    with _default_lock:
        stale = _default_env is not None and _default_env != _env()
        if _default is None or _default._pid != os.getpid() or stale:
            env = _env()
            _default, _default_env = Client(), env
        return _default


def metrics(client=None):
    """The metrics of client (default: the default connection) as a dict;
    see Client.metrics. ``sluice.metrics()["sluice_loader_stall_seconds_total"]``
    is how long this process's training loop has waited on data."""
    return (client or _client()).metrics()


class File(_Handle):
    """A file in Sluice, read and written at offsets. ``close`` publishes a
    written file's length."""

    def __init__(self, client, path, write):
        self.path = path
        self._client = client
        self._own(_lib.handle_out("sluice_file_open", ctypes.c_uint64(client.handle()), path.encode(), int(write)))

    def pread(self, n, offset):
        """Up to n bytes at offset (fewer only at the end of the file)."""
        buf = ctypes.create_string_buffer(n)
        got = ctypes.c_int64()
        _lib.call("sluice_file_pread", ctypes.c_uint64(self.handle()), buf, n, offset, ctypes.byref(got))
        return buf.raw[: got.value]

    def pwrite(self, data, offset):
        data = bytes(data)
        _lib.call("sluice_file_pwrite", ctypes.c_uint64(self.handle()), data, len(data), offset)
        return len(data)

    def size(self):
        return _lib.int_out("sluice_file_size", ctypes.c_uint64(self.handle()))


class Dataset(_Handle):
    """A dataset in Sluice: ``len``, ``schema``, ``take`` and ``loader``."""

    def __init__(self, name, client=None):
        self.name = name
        self._client = client or _client()
        self._own(_lib.handle_out("sluice_dataset_open", ctypes.c_uint64(self._client.handle()), name.encode()))
        self.manifest = _lib.json_out("sluice_dataset_manifest", ctypes.c_uint64(self.handle()))

    def __len__(self):
        return _lib.int_out("sluice_dataset_len", ctypes.c_uint64(self.handle()))

    @property
    def schema(self):
        return self.take([]).schema

    def take(self, indices, columns=None):
        """The samples at indices (any order, repeats allowed) as one pyarrow.RecordBatch."""
        idx = (ctypes.c_int64 * len(indices))(*[int(i) for i in indices])
        arr = ctypes.create_string_buffer(_ARROW_ARRAY)
        sch = ctypes.create_string_buffer(_ARROW_SCHEMA)
        cols = json.dumps(list(columns)).encode() if columns else b""
        _lib.call(
            "sluice_dataset_take", ctypes.c_uint64(self.handle()), idx, len(indices), cols,
            ctypes.addressof(arr), ctypes.addressof(sch),
        )
        return pa.RecordBatch._import_from_c(ctypes.addressof(arr), ctypes.addressof(sch))

    def _scan_batch_size(self, target_bytes=16 << 20):
        """Rows per batch of about target_bytes, from the mean sample size."""
        n = max(1, self.manifest.get("samples", 0))
        stored = sum(s["bytes"] for s in self.manifest.get("shards", []))
        return max(1, min(65536, target_bytes * n // max(1, stored)))

    def to_reader(self, columns=None, batch_size=None, **loader_options):
        """Every sample once, in order (no shuffle), as a pyarrow.RecordBatchReader
        straight from the loader's buffers. It reads as it is consumed and can
        be consumed once: DuckDB (``duckdb.arrow(r)``, or a query naming it),
        Polars (``pl.from_arrow(r)``) and pyarrow (``r.read_all()``) take it
        without a copy on the way. batch_size defaults to about 16 MiB of
        samples; other options are the loader's (rank, world_size, ...)."""
        options = dict(loader_options, shuffle=False, columns=columns,
                       batch_size=batch_size or self._scan_batch_size())
        return Loader(self, **options)._reader()

    def scanner(self, columns=None, filter=None, batch_size=None, **loader_options):
        """A ``pyarrow.dataset.Scanner`` over ``to_reader``: columns and filter
        (a ``pyarrow.compute`` expression) apply as the batches stream by.
        DuckDB queries it by name (``duckdb.sql("select ... from s")``) and
        pushes its projection and filters into it; ``.to_reader()`` and
        ``.to_table()`` feed Polars and pyarrow. It scans once; call again for
        another pass. (pyarrow 18's InMemoryDataset takes no stream, so a
        rescannable ``pyarrow.dataset.Dataset`` would need the data copied
        out first, which this avoids.)"""
        import pyarrow.dataset as pads
        reader = self.to_reader(batch_size=batch_size, **loader_options)
        return pads.Scanner.from_batches(reader, columns=columns, filter=filter)

    def loader(self, batch_size, shuffle=True, seed=0, epoch=0, rank=0, world_size=1, columns=None, **kw):
        return Loader(self, batch_size=batch_size, shuffle=shuffle, seed=seed, epoch=epoch, rank=rank,
                      world_size=world_size, columns=columns, **kw)


class Loader(_Handle):
    """Batches of one rank, as pyarrow.RecordBatch, one epoch per iteration.

    Iterating yields the rest of the current epoch; ``set_epoch(e)`` starts
    epoch e. ``state_dict()`` after any batch, given to ``load_state_dict``
    of a new loader (even with another world size), continues exactly.
    Options: batch_size, shuffle, seed, epoch, rank, world_size, columns,
    drop_last, index_column, readers, prefetch_bytes, worker, workers,
    shared_memory (batches in a memfd another process can map: see
    ``shared_memory()``), agent (a local agent's socket, default
    SLUICE_AGENT: batches are read through it, over shared-memory rings,
    into memory shared with it; "" reads directly from storage).
    """

    def __init__(self, dataset, **options):
        if options.get("agent") is None:
            options["agent"] = os.environ.get("SLUICE_AGENT", "")
        options = {k: v for k, v in options.items() if v is not None}
        self.dataset = dataset
        self.options = options
        self._own(_lib.handle_out("sluice_loader_new", ctypes.c_uint64(dataset.handle()), json.dumps(options).encode()))

    def _reader(self):
        stream = ctypes.create_string_buffer(_ARROW_STREAM)
        _lib.call("sluice_loader_stream", ctypes.c_uint64(self.handle()), ctypes.addressof(stream))
        return pa.RecordBatchReader._import_from_c(ctypes.addressof(stream))

    def __iter__(self):
        reader = self._reader()
        while True:
            try:
                if _lib.handed_off():
                    # The main thread: wait in short calls, between which
                    # Ctrl-C raises KeyboardInterrupt, then take the batch
                    # here, which no longer blocks (a hand-off to a helper
                    # thread for every batch cost a tenth of the rate).
                    while not self._ready():
                        pass
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except (pa.ArrowException, OSError) as e:  # the stream's error is Go's, as an Arrow IOError
                raise SluiceError(str(e)) from e
            yield batch

    def _ready(self, timeout_ms=100):
        """Whether the next batch comes at once, after waiting at most
        timeout_ms for it."""
        ready = ctypes.c_int()
        _lib.call("sluice_loader_wait", ctypes.c_uint64(self.handle()), timeout_ms, ctypes.byref(ready))
        return ready.value == 1

    def __arrow_c_stream__(self, requested_schema=None):
        # The stream holds the loader (in libsluice) until it is released,
        # so it outlives this object: from_stream(ds.loader(...)) works.
        return self._reader().__arrow_c_stream__(requested_schema)

    def __len__(self):
        """Steps this rank takes in a whole epoch."""
        return _lib.int_out("sluice_loader_steps", ctypes.c_uint64(self.handle()))

    def shared_memory(self):
        """For a loader made with shared_memory=True, (fd, addr, size): its
        batches' memfd, the address it is mapped at here and its size; a
        buffer at address p lies at p - addr in the memfd, which another
        process of the same user maps through /proc/PID/fd/FD. None for
        other loaders."""
        fd, addr, size = ctypes.c_int64(), ctypes.c_uint64(), ctypes.c_int64()
        _lib.call("sluice_loader_memory", ctypes.c_uint64(self.handle()), ctypes.byref(fd), ctypes.byref(addr),
                  ctypes.byref(size))
        return None if fd.value < 0 else (fd.value, addr.value, size.value)

    def set_epoch(self, epoch):
        _lib.call("sluice_loader_set_epoch", ctypes.c_uint64(self.handle()), int(epoch))

    def state_dict(self):
        """The state after the last batch delivered: a small dict of integers."""
        return json.loads(self._state_json())

    def _state_json(self):
        """state_dict as JSON text, for a process that passes it on."""
        return _lib.text_out("sluice_loader_state", ctypes.c_uint64(self.handle()))

    def load_state_dict(self, state):
        _lib.call("sluice_loader_resume", ctypes.c_uint64(self.handle()), json.dumps(state).encode())

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
