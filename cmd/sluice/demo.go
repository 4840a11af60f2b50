package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice/dataset"
	"github.com/sluicefs/sluice/sdk"
	"github.com/sluicefs/sluice/server/cluster"
)

// demoConfig is the job `make demo` runs.
type demoConfig struct {
	samples        int
	minSize, maxSz int // sample sizes, log-uniform between them
	batch, epochs  int
	quiet          bool
}

func newDemoCmd() *cobra.Command {
	cfg := demoConfig{minSize: 512, maxSz: 32 << 10}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start an embedded cluster in a temporary directory, import a generated dataset and run shuffled epochs through the loader",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return demo(cmd.Context(), cmd.OutOrStdout(), cfg)
		},
	}
	cmd.Flags().IntVar(&cfg.samples, "samples", 40000, "samples to generate")
	cmd.Flags().IntVar(&cfg.batch, "batch", 256, "batch size")
	cmd.Flags().IntVar(&cfg.epochs, "epochs", 2, "shuffled epochs to run")
	cmd.Flags().BoolVarP(&cfg.quiet, "quiet", "q", false, "no progress bars")
	return cmd
}

// demoSample is sample i: its first 8 bytes are i, the rest random, its
// size log-uniform; its label is i mod 1000.
func demoSample(cfg demoConfig, i int) []byte {
	rng := rand.New(rand.NewPCG(uint64(i), 42))
	lo, hi := math.Log(float64(cfg.minSize)), math.Log(float64(cfg.maxSz))
	n := int(math.Exp(lo + rng.Float64()*(hi-lo)))
	b := make([]byte, max(n, 8))
	for k := 8; k+8 <= len(b); k += 8 {
		binary.LittleEndian.PutUint64(b[k:], rng.Uint64())
	}
	binary.LittleEndian.PutUint64(b, uint64(i))
	return b
}

func demo(ctx context.Context, out io.Writer, cfg demoConfig) error {
	if ctx == nil {
		ctx = context.Background()
	}
	dir, err := os.MkdirTemp("", "sluice-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	t0 := time.Now()
	c, err := cluster.Start(ctx, cluster.Config{Dir: dir, Targets: 3, Replicas: 3})
	if err != nil {
		return err
	}
	defer c.Close()
	cl, err := sdk.Connect(ctx, sdk.Config{Cluster: c.Addr, Token: c.Token, Fabric: c.Fabric()})
	if err != nil {
		return err
	}
	defer cl.Close()
	fmt.Fprintf(out, "embedded cluster up in %v: 3 storage targets, chains of 3 replicas, control plane at %s\n", time.Since(t0).Round(time.Millisecond), c.Addr)

	// Import: generated samples through the dataset writer.
	t0 = time.Now()
	w, err := dataset.Create(ctx, cl, "demo", []dataset.Column{{Name: "data", Type: dataset.Binary}, {Name: "label", Type: dataset.Int64}},
		dataset.WriterOptions{ShardBytes: 64 << 20, Source: "sluice demo (generated)"})
	if err != nil {
		return err
	}
	bar := progress(out, int64(cfg.samples), cfg.quiet || cfg.samples < 1000)
	for i := 0; i < cfg.samples; i++ {
		if err := w.Add(demoSample(cfg, i), int64(i%1000)); err != nil {
			w.Abort()
			return err
		}
		if i%256 == 255 || i == cfg.samples-1 {
			bar(int64(i + 1))
		}
	}
	m, err := w.Close()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "imported dataset %q: %d samples of %d B to %d KiB, %.0f MiB in %d shards, %.1f MB/s (3 replicas, synced)\n",
		m.Name, m.Samples, cfg.minSize, cfg.maxSz>>10, float64(m.Bytes())/(1<<20), len(m.Shards), float64(m.Bytes())/1e6/time.Since(t0).Seconds())

	d, err := dataset.Open(ctx, cl, "demo")
	if err != nil {
		return err
	}
	defer d.Close()
	l, err := d.Loader(dataset.LoaderConfig{BatchSize: cfg.batch, Shuffle: true, Seed: 2026, IndexColumn: "index"})
	if err != nil {
		return err
	}
	defer l.Close()
	var firstOrder []int64
	for epoch := 0; epoch < cfg.epochs; epoch++ {
		l.SetEpoch(int64(epoch))
		seen := make([]bool, m.Samples)
		var samples, bytes int64
		once, content := true, true
		var order []int64
		bar := progress(out, m.Samples, cfg.quiet || m.Samples < 1000)
		t0 := time.Now()
		err := l.Each(ctx, func(b *dataset.Batch) error {
			data := b.Column(0).(*array.Binary)
			labels := b.Column(1).(*array.Int64)
			idx := b.Column(2).(*array.Int64)
			for r := 0; r < int(b.NumRows()); r++ {
				i := idx.Value(r)
				once = once && !seen[i]
				seen[i] = true
				v := data.Value(r)
				content = content && len(v) >= 8 && binary.LittleEndian.Uint64(v) == uint64(i) && labels.Value(r) == i%1000
				if len(order) < 16 {
					order = append(order, i)
				}
			}
			samples += b.NumRows()
			bytes += b.Bytes
			bar(samples)
			return nil
		})
		if err != nil {
			return err
		}
		secs := time.Since(t0).Seconds()
		for _, s := range seen {
			once = once && s
		}
		fmt.Fprintf(out, "epoch %d: %d samples, %.0f samples/s, %.1f MB/s, each sample exactly once: %s, contents checked: %s\n",
			epoch, samples, float64(samples)/secs, float64(bytes)/1e6/secs, yes(once && samples == m.Samples), yes(content))
		if !once || !content || samples != m.Samples {
			return fmt.Errorf("epoch %d: the loader's output is wrong", epoch)
		}
		if epoch == 0 {
			firstOrder = order
		} else if fmt.Sprint(order) == fmt.Sprint(firstOrder) {
			return fmt.Errorf("epoch %d began in epoch 0's order", epoch)
		}
	}
	return nil
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}
