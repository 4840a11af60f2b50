package arrowflight

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/auth"
	"github.com/sluicefs/sluice/dataset"
	"github.com/sluicefs/sluice/rpc"
	"github.com/sluicefs/sluice/rpc/rpctest"
	"github.com/sluicefs/sluice/sdk"
	"github.com/sluicefs/sluice/server/cluster"
)

// points is the size of dataset "points": sample i has id i and data
// sampleData(i).
const points = 1000

func sampleData(i int64) []byte {
	b := make([]byte, i%97)
	for k := range b {
		b[k] = byte(i)
	}
	return b
}

// env is a test's embedded cluster, holding dataset "points".
type env struct {
	cl    *sdk.Client
	token string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Dir: t.TempDir(), Targets: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cl, err := sdk.Connect(ctx, sdk.Config{Cluster: c.Addr, Token: c.Token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	w, err := dataset.Create(ctx, cl, "points", []dataset.Column{{Name: "id", Type: dataset.Int64}, {Name: "data", Type: dataset.Binary}}, dataset.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(points) {
		if err := w.Add(i, sampleData(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &env{cl: cl, token: c.Token}
}

// serve starts a Flight server on a real TCP port and returns a client
// that sends token ("" for the cluster's), over a plaintext connection or
// with the transport credentials given.
func (e *env) serve(t testing.TB, cfg Config, token string, transport ...credentials.TransportCredentials) flight.Client {
	t.Helper()
	cfg.Client, cfg.Token = e.cl, e.token
	if token == "" {
		token = e.token
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	creds := insecure.NewCredentials()
	if len(transport) > 0 {
		creds = transport[0]
	}
	fc, err := flight.NewClientWithMiddleware(ln.Addr().String(), nil, nil,
		grpc.WithTransportCredentials(creds), auth.Credentials(token),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fc.Close()
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return fc
}

// read reads a DoGet stream: the ids in order and each batch's app
// metadata. stopAfter > 0 stops after that many batches.
func read(t *testing.T, ctx context.Context, fc flight.Client, tk *flight.Ticket, stopAfter int) (ids []int64, metas [][]byte) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := fc.DoGet(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	r, err := flight.NewRecordReader(st)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	for r.Next() {
		rec := r.RecordBatch()
		idc := rec.Column(0).(*array.Int64)
		data := rec.Column(1).(*array.Binary)
		for i := range int(rec.NumRows()) {
			id := idc.Value(i)
			if !slices.Equal(data.Value(i), sampleData(id)) {
				t.Fatalf("sample %d: data %x", id, data.Value(i))
			}
			ids = append(ids, id)
		}
		metas = append(metas, slices.Clone(r.LatestAppMetadata()))
		if stopAfter > 0 && len(metas) == stopAfter {
			return ids, metas
		}
	}
	if err := r.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return ids, metas
}

// TestShardsPartitionTheEpoch: ListFlights shows the dataset; a shuffled
// descriptor over 3 ranks gives 3 endpoints whose streams together hold
// every sample once, each in the order the Go loader gives that rank.
func TestShardsPartitionTheEpoch(t *testing.T) {
	e := newEnv(t)
	fc := e.serve(t, Config{}, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	ls, err := fc.ListFlights(ctx, &flight.Criteria{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for {
		fi, err := ls.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var c Command
		json.Unmarshal(fi.FlightDescriptor.Cmd, &c)
		if c.Dataset == "points" {
			found = true
			if fi.TotalRecords != points {
				t.Errorf("ListFlights: %d records, want %d", fi.TotalRecords, points)
			}
			schema, err := flight.DeserializeSchema(fi.Schema, memory.DefaultAllocator)
			if err != nil || schema.NumFields() != 2 || schema.Field(1).Type.ID() != arrow.BINARY {
				t.Errorf("ListFlights schema %v (%v)", schema, err)
			}
		}
	}
	if !found {
		t.Fatal("ListFlights did not list points")
	}

	c := Command{Dataset: "points", BatchSize: 64, Shuffle: true, Seed: 3, WorldSize: 3}
	fi, err := fc.GetFlightInfo(ctx, c.descriptor())
	if err != nil {
		t.Fatal(err)
	}
	if len(fi.Endpoint) != 3 {
		t.Fatalf("%d endpoints, want one per rank (3)", len(fi.Endpoint))
	}
	d, err := dataset.Open(ctx, e.cl, "points")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	seen := make([]int, points)
	for r, ep := range fi.Endpoint {
		ids, _ := read(t, ctx, fc, ep.Ticket, 0)
		for _, id := range ids {
			seen[id]++
		}
		want := loaderOrder(t, d, dataset.LoaderConfig{BatchSize: 64, Shuffle: true, Seed: 3, Rank: r, WorldSize: 3})
		if !slices.Equal(ids, want) {
			t.Errorf("rank %d: %d ids, not the loader's %d in its order", r, len(ids), len(want))
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("sample %d delivered %d times over the ranks, want once", id, n)
		}
	}
}

func loaderOrder(t *testing.T, d *dataset.Dataset, cfg dataset.LoaderConfig) []int64 {
	t.Helper()
	l, err := d.Loader(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var ids []int64
	err = l.Each(context.Background(), func(b *dataset.Batch) error {
		ids = append(ids, b.Column(0).(*array.Int64).Int64Values()...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestResumeMidStream: a reader that stops after some batches and
// reconnects with the last batch's state reads exactly the rest.
//
// Its streams' budget is the loader's least, three batches: a batch that
// stayed held once sent (the frames' release, send.go) would stall them.
func TestResumeMidStream(t *testing.T) {
	fc := newEnv(t).serve(t, Config{StreamMemory: 1}, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := Command{Dataset: "points", BatchSize: 50, Shuffle: true, Seed: 9, Rank: 1, WorldSize: 2}
	all, _ := read(t, ctx, fc, c.ticket(1), 0)
	head, metas := read(t, ctx, fc, c.ticket(1), 3)
	if len(metas) != 3 {
		t.Fatalf("read %d batches, want 3", len(metas))
	}
	var st dataset.State
	if err := json.Unmarshal(metas[2], &st); err != nil {
		t.Fatalf("app metadata %q: %v", metas[2], err)
	}
	c.State = &st
	tail, _ := read(t, ctx, fc, c.ticket(1), 0)
	if got := append(head, tail...); !slices.Equal(got, all) {
		t.Fatalf("resumed: %d ids (%d + %d), want the uninterrupted %d in order", len(got), len(head), len(tail), len(all))
	}
}

// TestPutAndReadBack: DoPut imports a stream as a new dataset that DoGet
// serves with the same rows; a second put to the name is refused.
func TestPutAndReadBack(t *testing.T) {
	fc := newEnv(t).serve(t, Config{}, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "data", Type: arrow.BinaryTypes.Binary}}, nil)
	put := func(name string) error {
		st, err := fc.DoPut(ctx)
		if err != nil {
			return err
		}
		w := flight.NewRecordWriter(st, ipc.WithSchema(schema))
		w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{name}})
		for lo := int64(0); lo < 300; lo += 100 {
			b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
			for i := lo; i < lo+100; i++ {
				b.Field(0).(*array.Int64Builder).Append(i)
				b.Field(1).(*array.BinaryBuilder).Append(sampleData(i))
			}
			rec := b.NewRecordBatch()
			err := w.Write(rec)
			rec.Release()
			b.Release()
			if err != nil {
				// The server may refuse before the stream ends: a send then
				// fails with io.EOF, and the refusal is what Recv returns.
				if _, rerr := st.Recv(); rerr != nil {
					return rerr
				}
				return err
			}
		}
		w.Close()
		st.CloseSend()
		res, err := st.Recv()
		if err != nil {
			return err
		}
		var pr PutResult
		if err := json.Unmarshal(res.AppMetadata, &pr); err != nil || pr.Samples != 300 {
			return fmt.Errorf("put result %q (%v), want 300 samples", res.AppMetadata, err)
		}
		return nil
	}
	if err := put("put-back"); err != nil {
		t.Fatal(err)
	}
	ids, _ := read(t, ctx, fc, Command{Dataset: "put-back", BatchSize: 64, WorldSize: 1}.ticket(0), 0)
	want := make([]int64, 300)
	for i := range want {
		want[i] = int64(i)
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("read back %d ids, want 0..299 in order", len(ids))
	}
	if err := put("put-back"); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second put to the same name: %v, want ALREADY_EXISTS", err)
	}
}

// TestRefusals: each bad request gets its status code and a message that
// says what was wrong.
func TestRefusals(t *testing.T) {
	e := newEnv(t)
	good := e.serve(t, Config{MaxStreams: 1}, "")
	wrong := e.serve(t, Config{}, "not-the-token")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	info := func(fc flight.Client, cmd string) error {
		_, err := fc.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: []byte(cmd)})
		return err
	}
	otherState, _ := json.Marshal(Command{Dataset: "points", State: &dataset.State{Version: 1, Dataset: "feedface"}})
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
	}{
		{"wrong token", info(wrong, `{"dataset": "points"}`), codes.Unauthenticated},
		{"malformed descriptor", info(good, `{"dataset": "points"`), codes.InvalidArgument},
		{"unknown field", info(good, `{"dataset": "points", "batchsize": 3}`), codes.InvalidArgument},
		{"unknown dataset", info(good, `{"dataset": "no-such"}`), codes.NotFound},
		{"rank out of range", info(good, `{"dataset": "points", "rank": 2, "world_size": 2}`), codes.InvalidArgument},
		{"unknown column", info(good, `{"dataset": "points", "columns": ["nope"]}`), codes.InvalidArgument},
		{"another dataset's state", info(good, string(otherState)), codes.InvalidArgument},
	} {
		if status.Code(tc.err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.code)
		} else {
			t.Logf("%s: %v", tc.name, tc.err)
		}
	}
	// One stream is open (its first batch read, the rest unread): the
	// server's limit of one refuses a second.
	hold, cancelHold := context.WithCancel(ctx)
	defer cancelHold()
	st, err := good.DoGet(hold, Command{Dataset: "points", BatchSize: 10, WorldSize: 1}.ticket(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	st2, err := good.DoGet(ctx, Command{Dataset: "points", BatchSize: 10, WorldSize: 1}.ticket(0))
	if err == nil {
		_, err = st2.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a stream past the limit: %v, want RESOURCE_EXHAUSTED", err)
	}
	// The client that held it goes away mid-stream: its handler ends,
	// closes its loader and gives the slot back.
	cancelHold()
	for {
		st, err := good.DoGet(ctx, Command{Dataset: "points", BatchSize: 100, WorldSize: 1}.ticket(0))
		if err != nil {
			t.Fatal(err)
		}
		r, err := flight.NewRecordReader(st)
		if status.Code(err) == codes.ResourceExhausted {
			if ctx.Err() != nil {
				t.Fatal("the slot of a cancelled stream was never given back")
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		rows := int64(0)
		for r.Next() {
			rows += r.RecordBatch().NumRows()
		}
		r.Release()
		if rows != points {
			t.Fatalf("after the slot came back: %d rows, want %d", rows, points)
		}
		return
	}
}

// TestTLS: with Config.TLS the server answers a client that trusts its
// certificate, and not one that speaks plaintext.
func TestTLS(t *testing.T) {
	certFile, keyFile := rpctest.SelfSigned(t)
	server, err := rpc.ServerTLS(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	client, err := rpc.ClientTLS(certFile, "sluice.test")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	desc := Command{Dataset: "points"}.descriptor()
	if fi, err := e.serve(t, Config{TLS: server}, "", client).GetFlightInfo(ctx, desc); err != nil || fi.TotalRecords != points {
		t.Fatalf("over TLS: %v, %v", fi, err)
	}
	if _, err := e.serve(t, Config{TLS: server}, "").GetFlightInfo(ctx, desc); status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext to a TLS server: %v, want UNAVAILABLE", err)
	}
}
