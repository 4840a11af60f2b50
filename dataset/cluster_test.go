package dataset

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicefs/sluice/sdk"
	"github.com/sluicefs/sluice/server/cluster"
)

// The package's tests share one embedded cluster (started on first use).
var shared struct {
	once sync.Once
	dir  string
	c    *cluster.Cluster
	cl   *sdk.Client
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.cl != nil {
		shared.cl.Close()
	}
	if shared.c != nil {
		shared.c.Close()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

func client(t testing.TB) *sdk.Client {
	t.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if shared.dir, shared.err = os.MkdirTemp("", "sluice-dataset-"); shared.err != nil {
			return
		}
		if shared.c, shared.err = cluster.Start(ctx, cluster.Config{Dir: shared.dir, Targets: 3, ChunkSize: 256 << 10}); shared.err != nil {
			return
		}
		shared.cl, shared.err = sdk.Connect(ctx, sdk.Config{Cluster: shared.c.Addr, Token: shared.c.Token})
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.cl
}

// testColumns is the schema of generated datasets.
var testColumns = []Column{{"data", Binary}, {"label", Int64}, {"name", String}, {"score", Float32}}

// sample i of a generated dataset: its values follow from i and the seed.
func genSample(seed uint64, i int64, maxLen int) (data []byte, label int64, name string, score float32) {
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	data = make([]byte, rng.IntN(maxLen+1))
	for k := range data {
		data[k] = byte(rng.Uint32())
	}
	return data, i % 10, fmt.Sprintf("sample-%d", i), float32(i) / 4
}

var datasetSeq atomic.Int64

// makeDataset writes n generated samples as a new dataset named after name
// (with a number, so tests may run more than once on the shared cluster).
func makeDataset(t testing.TB, name string, n int64, maxLen int, shardBytes int64) *Dataset {
	t.Helper()
	name = fmt.Sprintf("%s-%d", name, datasetSeq.Add(1))
	cl := client(t)
	ctx := context.Background()
	w, err := Create(ctx, cl, name, testColumns, WriterOptions{ShardBytes: shardBytes})
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < n; i++ {
		data, label, nm, score := genSample(7, i, maxLen)
		if err := w.Add(data, label, nm, score); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := Open(ctx, cl, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
