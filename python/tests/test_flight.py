"""Sluice datasets in other Arrow tools: plain pyarrow.flight against
`sluice dev --flight`, DuckDB and Polars over the Python scanner, and the
`sluice dataset cat` / `import -` IPC pipes. Real processes throughout."""
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl
import pyarrow.parquet as pq
import pytest

import sluice
from conftest import N, SLUICE, go_order


def call_options(token=None):
    token = os.environ["SLUICE_TOKEN"] if token is None else token
    return fl.FlightCallOptions(headers=[(b"authorization", b"Bearer " + token.encode())], timeout=120)


@pytest.fixture
def client(cluster):
    c = fl.connect(cluster["SLUICE_FLIGHT"])
    yield c
    c.close()


def command(**kw):
    return fl.FlightDescriptor.for_command(json.dumps(kw))


def same(got, want):
    """Equal values and types; Sluice's columns are all non-nullable."""
    return got.cast(want.schema).combine_chunks().equals(want.combine_chunks())


def read_ids(client, ticket, stop_after=None):
    """The ids a DoGet stream delivers, in order, and each batch's app metadata."""
    reader = client.do_get(ticket, call_options())
    ids, metas = [], []
    while stop_after is None or len(metas) < stop_after:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        ids += chunk.data.column("id").to_pylist()
        metas.append(chunk.app_metadata.to_pybytes())
    return ids, metas


def test_list_flights(client):
    flights = {json.loads(f.descriptor.command)["dataset"]: f for f in client.list_flights(options=call_options())}
    assert "points" in flights
    assert flights["points"].total_records == N
    assert flights["points"].schema.names == ["x", "label", "id"]


def test_shards_partition_the_epoch(client):
    info = client.get_flight_info(command(dataset="points", batch_size=100, shuffle=True, seed=5, world_size=3),
                                  call_options())
    assert len(info.endpoints) == 3
    seen = []
    for rank, ep in enumerate(info.endpoints):
        ids, metas = read_ids(client, ep.ticket)
        # Each rank's stream is that rank's loader order (the Go loader's).
        want = [i for b in go_order("points", batch_size=100, shuffle=True, seed=5, rank=rank, world_size=3) for i in b]
        assert ids == want
        assert json.loads(metas[-1])["consumed"] == N
        seen += ids
    assert sorted(seen) == list(range(N))  # every sample exactly once


def test_reconnect_with_resume_state(client):
    cmd = dict(dataset="points", batch_size=64, shuffle=True, seed=11, rank=1, world_size=2)
    info = client.get_flight_info(command(**cmd), call_options())
    ticket = info.endpoints[1].ticket
    full, _ = read_ids(client, ticket)
    head, metas = read_ids(client, ticket, stop_after=5)  # then the client goes away
    assert len(metas) == 5
    resume = dict(json.loads(ticket.ticket), state=json.loads(metas[-1]))
    tail, _ = read_ids(client, fl.Ticket(json.dumps(resume)))
    assert head + tail == full
    assert len(full) == N // 2


def test_put_and_read_back(client):
    table = pa.table({"id": pa.array(range(500), pa.int64()), "name": [f"row-{i}" for i in range(500)],
                      "score": pa.array([i / 8 for i in range(500)], pa.float32())})
    writer, meta_reader = client.do_put(fl.FlightDescriptor.for_path("flight-put"), table.schema, call_options())
    writer.write_table(table, max_chunksize=128)
    writer.done_writing()
    result = json.loads(meta_reader.read().to_pybytes())
    writer.close()
    assert result["samples"] == 500
    got = client.do_get(fl.Ticket(json.dumps({"dataset": "flight-put", "batch_size": 64})), call_options()).read_all()
    assert same(got, table)
    with pytest.raises(pa.ArrowException, match="already exists"):
        writer, _ = client.do_put(fl.FlightDescriptor.for_path("flight-put"), table.schema, call_options())
        writer.write_table(table)
        writer.close()


def test_refusals(client):
    with pytest.raises(fl.FlightUnauthenticatedError):
        list(client.list_flights(options=call_options("not-the-token")))
    with pytest.raises(fl.FlightUnauthenticatedError):
        client.get_flight_info(command(dataset="points"), fl.FlightCallOptions(timeout=30))
    with pytest.raises(pa.ArrowInvalid, match="not a Sluice command"):
        client.get_flight_info(fl.FlightDescriptor.for_command(b"{nope"), call_options())
    with pytest.raises(KeyError, match="does not exist"):
        client.get_flight_info(command(dataset="no-such"), call_options())
    bad = {"version": 1, "dataset_hash": "feed", "consumed": 0}
    with pytest.raises(pa.ArrowInvalid, match="another dataset"):
        client.do_get(fl.Ticket(json.dumps({"dataset": "points", "state": bad})), call_options()).read_all()


@pytest.fixture(scope="module")
def numbers(cluster, tmp_path_factory):
    """Dataset "numbers" imported from a Parquet file; the file's path."""
    src = str(tmp_path_factory.mktemp("numbers") / "numbers.parquet")
    n = 20000
    pq.write_table(pa.table({"k": pa.array([i % 7 for i in range(n)], pa.int64()),
                             "v": pa.array([(i * 37 % 1001) / 4 for i in range(n)], pa.float64()),
                             "tag": [f"t{i % 13}" for i in range(n)]}), src, row_group_size=3000)
    subprocess.run([SLUICE, "dataset", "import", "-q", "--format", "parquet", src, "numbers"], check=True,
                   stdout=subprocess.DEVNULL)
    return src


def test_duckdb_and_polars_match_pyarrow(numbers):
    duckdb = pytest.importorskip("duckdb")
    pl = pytest.importorskip("polars")
    src = pq.read_table(numbers)
    want_rows, want_sum = src.num_rows, pc.sum(src["v"]).as_py()
    want_k3 = pc.sum(src.filter(pc.equal(src["k"], 3))["v"]).as_py()
    ds = sluice.Dataset("numbers")

    s = ds.scanner()
    assert duckdb.sql("select count(*), sum(v) from s").fetchall() == [(want_rows, pytest.approx(want_sum))]
    r = ds.to_reader()
    assert duckdb.sql("select sum(v) from r where k = 3").fetchall()[0][0] == pytest.approx(want_k3)
    assert duckdb.arrow(ds.to_reader()).aggregate("count(*)").fetchall() == [(want_rows,)]

    df = pl.from_arrow(ds.to_reader())
    assert df.height == want_rows
    assert df["v"].sum() == pytest.approx(want_sum)
    got = pl.from_arrow(ds.scanner(columns=["k", "v"], filter=pc.field("k") == 3).to_reader())
    assert got["v"].sum() == pytest.approx(want_k3)
    assert got.columns == ["k", "v"]


def test_cat_ipc_stream_round_trip(numbers, python):
    src = pq.read_table(numbers)
    reader = ("import sys, json, pyarrow as pa, pyarrow.compute as pc; "
              "t = pa.ipc.open_stream(sys.stdin.buffer).read_all(); "
              "print(json.dumps([t.num_rows, pc.sum(t['v']).as_py(), t.schema.names]))")
    cat = subprocess.Popen([SLUICE, "dataset", "cat", "numbers", "--batch-size", "4096", "--format", "arrow"],
                           stdout=subprocess.PIPE)
    out = subprocess.run([python, "-c", reader], stdin=cat.stdout, check=True, capture_output=True, text=True).stdout
    cat.stdout.close()
    assert cat.wait(timeout=60) == 0
    rows, total, names = json.loads(out)
    assert (rows, names) == (src.num_rows, src.schema.names)
    assert total == pytest.approx(pc.sum(src["v"]).as_py())

    # Back in from standard input: the same rows, in the same order.
    cat = subprocess.Popen([SLUICE, "dataset", "cat", "numbers", "--format", "arrow"], stdout=subprocess.PIPE)
    subprocess.run([SLUICE, "dataset", "import", "--format", "arrow", "-", "numbers-again"], stdin=cat.stdout,
                   check=True, stdout=subprocess.DEVNULL)
    cat.stdout.close()
    assert cat.wait(timeout=60) == 0
    assert same(sluice.Dataset("numbers-again").to_reader().read_all(), src)

    # And as a Parquet file.
    pqout = subprocess.run([SLUICE, "dataset", "cat", "numbers", "--format", "parquet"], check=True,
                           capture_output=True).stdout
    assert same(pq.read_table(pa.BufferReader(pqout)), src)


def test_sluice_flight_command(cluster):
    """`sluice flight` as its own process, a client of the cluster like any other."""
    proc = subprocess.Popen([SLUICE, "flight", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("export SLUICE_FLIGHT=grpc://"), line
        client = fl.connect(line.strip().split("=", 1)[1])
        names = [json.loads(f.descriptor.command)["dataset"] for f in client.list_flights(options=call_options())]
        assert "points" in names
        ids, _ = read_ids(client, fl.Ticket(json.dumps({"dataset": "points", "batch_size": 1000})))
        assert ids == list(range(N))
        client.close()
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


def test_sluice_flight_helper(cluster):
    """sluice.flight: a client that sends the token itself, and the resume ticket."""
    import sluice.flight
    client = sluice.flight.connect()
    info = client.get_flight_info(sluice.flight.descriptor("points", batch_size=300, world_size=2))
    first = client.do_get(info.endpoints[0].ticket)
    chunk = first.read_chunk()
    rest = client.do_get(sluice.flight.ticket(info.endpoints[0].ticket, chunk.app_metadata.to_pybytes())).read_all()
    assert chunk.data.column("id").to_pylist() + rest.column("id").to_pylist() == \
        [i for b in go_order("points", batch_size=300, shuffle=False, world_size=2) for i in b]
    with pytest.raises(fl.FlightUnauthenticatedError):
        list(sluice.flight.connect(token="wrong").list_flights())
