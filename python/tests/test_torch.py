import numpy as np
import pytest

torch = pytest.importorskip("torch")
import sluice.torch as st  # noqa: E402
from conftest import DIM, N  # noqa: E402


def features(batch):
    x = batch["x"].view(torch.float32).reshape(-1, DIM)
    return x, batch["label"]


def test_tensors_and_offsets(cluster):
    ds = st.IterableDataset("points", batch_size=10, shuffle=False)
    batch = next(iter(ds))
    assert batch["x"].dtype == torch.uint8 and batch["x_offsets"].tolist() == list(range(0, 11 * 64, 64))
    assert batch["id"].tolist() == list(range(10))


def test_spawn_workers_cover_each_sample_once_and_resume(cluster):
    ds = st.IterableDataset("points", batch_size=50, shuffle=True, seed=5)
    loader = st.DataLoader(ds, num_workers=2)
    ids = []
    for i, batch in enumerate(loader):
        ids += batch["id"].tolist()
        if i == 40:
            state = loader.state_dict()
            cut = len(ids)
    assert sorted(ids) == list(range(N))
    assert state["consumed"] == 41 * 50
    ds2 = st.IterableDataset("points", batch_size=50, shuffle=True, seed=5)
    loader2 = st.DataLoader(ds2, num_workers=2)
    loader2.load_state_dict(state)
    rest = [i for b in loader2 for i in b["id"].tolist()]
    assert ids[:cut] + rest == ids


def test_model_trains_with_spawn_workers(cluster):
    torch.manual_seed(0)
    model = torch.nn.Linear(DIM, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ds = st.IterableDataset("points", batch_size=16, shuffle=True, seed=0, columns=["x", "label"])
    losses = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        for batch in st.DataLoader(ds, num_workers=2):
            x, y = features(batch)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert len(losses) == 2 * N // 16
    first, last = np.mean(losses[:30]), np.mean(losses[-30:])
    assert last < 0.5 * first, "loss went from %.3f to %.3f" % (first, last)


def test_tensor_columns(cluster, tmp_path):
    import subprocess

    import pyarrow as pa
    import pyarrow.parquet as pq
    from conftest import SLUICE

    n, dim = 300, 8
    emb = np.arange(n * dim, dtype=np.float32).reshape(n, dim) / 4
    digest = [bytes((i * 7 + k) % 256 for k in range(4)) for i in range(n)]
    tokens = [list(range(i * 10, i * 10 + i % 4)) for i in range(n)]
    table = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), dim),
        "digest": pa.array(digest, pa.binary(4)),
        "tokens": pa.array(tokens, pa.large_list(pa.int32())),
    })
    src = str(tmp_path / "tensors.parquet")
    pq.write_table(table, src, row_group_size=100)
    subprocess.run([SLUICE, "dataset", "import", "-q", "--format", "parquet", src, "tensors"], check=True,
                   stdout=subprocess.DEVNULL)
    ds = st.IterableDataset("tensors", batch_size=32, shuffle=True, seed=1)
    seen = 0
    for batch in ds:
        ids = batch["id"].numpy()
        x = batch["emb"]
        assert x.dtype == torch.float32 and tuple(x.shape) == (len(ids), dim)
        assert np.array_equal(x.numpy(), emb[ids])
        assert batch["digest"].shape == (len(ids), 4)
        assert [bytes(r) for r in batch["digest"].numpy()] == [digest[i] for i in ids]
        vals, offs = batch["tokens"].numpy(), batch["tokens_offsets"].numpy()
        assert [vals[offs[j]:offs[j + 1]].tolist() for j in range(len(ids))] == [tokens[i] for i in ids]
        seen += len(ids)
    assert seen == n


def test_fixed_size_list_is_not_copied():
    import pyarrow as pa

    col = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(40, dtype=np.float32)), 4).slice(2, 5)
    t = st.to_tensors(pa.record_batch([col], names=["v"]))["v"]
    assert tuple(t.shape) == (5, 4) and t[0, 0].item() == 8
    assert t.data_ptr() == col.values.buffers()[1].address + 8 * 4
