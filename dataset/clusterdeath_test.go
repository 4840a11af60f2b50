package dataset

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/sluicefs/sluice/sdk"
	"github.com/sluicefs/sluice/server/cluster"
)

// A loader whose cluster dies mid-epoch returns an error within the
// client's OpTimeout instead of waiting forever.
func TestLoaderClusterDies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Dir: t.TempDir(), Targets: 3, ChunkSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := sdk.Connect(ctx, sdk.Config{Cluster: c.Addr, Token: c.Token, OpTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w, err := Create(ctx, cl, "dies", testColumns, WriterOptions{ShardBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(2000) {
		if err := w.Add(genSample(7, i, 512)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := Open(ctx, cl, "dies")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l, err := d.Loader(LoaderConfig{BatchSize: 10, Readers: 1, Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b, err := l.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	c.Close()
	start := time.Now()
	for {
		b, err := l.Next(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				t.Fatal("the epoch ended with the cluster gone")
			}
			if !errors.Is(err, sdk.ErrTimeout) {
				t.Errorf("error %v: want sdk.ErrTimeout", err)
			}
			break
		}
		b.Release()
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the error took %v with a 1 s OpTimeout", took)
	}
}
