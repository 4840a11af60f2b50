"""PyTorch adapters: an IterableDataset of dicts of tensors, and a
DataLoader wrapper that checkpoints it.

    ds = sluice.torch.IterableDataset("mnist", batch_size=64, seed=0)
    loader = sluice.torch.DataLoader(ds, num_workers=2)   # spawn workers
    for batch in loader:
        x, y = batch["image"], batch["label"]             # tensors
    torch.save(loader.state_dict(), "ckpt")

Fixed-width columns become 1-D tensors; fixed_size_list<T>[N] columns
(embeddings) 2-D tensors of T, one row of N per sample, and
fixed_size_binary[N] 2-D uint8 tensors. A variable-length column ``c``
becomes ``batch[c]`` (uint8 values, all samples' bytes end to end; for
list<T> and large_list<T>, T elements) and ``batch[c + "_offsets"]``
(int64, sample i is values[off[i]:off[i+1]]).
Tensors share the batch's memory (no copy in the main process); DataLoader
workers hand them over as usual. Each worker takes every num_workers-th
step of its rank, so together they deliver each step once, in order.
"""
import json
import os
import warnings

import numpy as np
import pyarrow as pa
import torch
import torch.utils.data

import sluice

_STATE = "__state__"


def to_tensors(batch):
    """A pyarrow.RecordBatch as a dict of torch tensors (no copy)."""
    out = {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*")
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


class IterableDataset(torch.utils.data.IterableDataset):
    """One rank's batches of a Sluice dataset as dicts of tensors.

    Picklable: it holds the cluster address, token and options, and opens
    the dataset lazily in whichever process iterates it.
    """

    def __init__(self, name, batch_size, shuffle=True, seed=0, epoch=0, rank=0, world_size=1,
                 columns=None, drop_last=False, cluster=None, token=None, **options):
        super().__init__()
        self.name = name
        self.cluster = cluster or os.environ.get("SLUICE_CLUSTER", "")
        self.token = token or os.environ.get("SLUICE_TOKEN", "")
        self.options = dict(batch_size=batch_size, shuffle=shuffle, seed=seed, rank=rank,
                            world_size=world_size, columns=columns, drop_last=drop_last, **options)
        self.epoch = epoch
        self._start = None  # a state to resume from, else the epoch's start
        self._state = None  # the state after the last batch delivered

    def set_epoch(self, epoch):
        self.epoch = epoch
        self._start = None
        self._state = None

    def state_dict(self):
        if self._state is not None:
            return dict(self._state)
        if self._start is not None:
            return dict(self._start)
        return {"epoch": self.epoch, "consumed": 0, "fresh": True}

    def load_state_dict(self, state):
        if state.get("fresh"):
            self.set_epoch(state["epoch"])
            return
        self._start = dict(state)
        self.epoch = state["epoch"]
        self._state = None

    def _batches(self, worker, workers):
        client = sluice.Client(self.cluster, self.token)
        ds = sluice.Dataset(self.name, client=client)
        loader = ds.loader(epoch=self.epoch, worker=worker, workers=workers, **self.options)
        try:
            if self._start is not None:
                loader.load_state_dict(self._start)
            for batch in loader:
                out = to_tensors(batch)
                out[_STATE] = json.dumps(loader.state_dict())
                yield out
        finally:
            loader.close()
            ds.close()
            client.close()

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is None:  # in the main process: track the state here
            for out in self._batches(0, 1):
                self._state = json.loads(out.pop(_STATE))
                yield out
            return
        yield from self._batches(info.id, info.num_workers)


class DataLoader:
    """torch.utils.data.DataLoader over an IterableDataset, with spawn
    workers by default, batch_size=None (batches come whole), and
    state_dict / load_state_dict for checkpoints."""

    def __init__(self, dataset, num_workers=0, multiprocessing_context="spawn", **kw):
        self.dataset = dataset
        if num_workers == 0:
            multiprocessing_context = None
        self._dl = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=num_workers,
                                               multiprocessing_context=multiprocessing_context, **kw)

    def __iter__(self):
        for batch in self._dl:
            state = batch.pop(_STATE, None)
            if state is not None:
                self.dataset._state = json.loads(state)
            yield batch

    def state_dict(self):
        return self.dataset.state_dict()

    def load_state_dict(self, state):
        self.dataset.load_state_dict(state)
        self.dataset._state = None
