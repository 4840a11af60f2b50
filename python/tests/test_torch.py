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
