package arrowflight

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"

	"github.com/sluicefs/sluice/dataset"
)

// BenchmarkDoGet reads one epoch of a dataset of SLUICE_FLIGHT_BENCH_MIB
// (default 64) MiB through a Go Flight client over TCP ("flight") and
// straight from the loader in the same process ("loader", the baseline),
// for 64 KiB and 1 MiB samples in batches of about 8 MiB:
//
//	SLUICE_FLIGHT_BENCH_MIB=256 go test -run '^$' -bench DoGet -benchtime 3x ./arrowflight/
func BenchmarkDoGet(b *testing.B) {
	mib := 64
	if s := os.Getenv("SLUICE_FLIGHT_BENCH_MIB"); s != "" {
		mib, _ = strconv.Atoi(s)
	}
	e := newEnv(b)
	fc := e.serve(b, Config{}, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, size := range []int{64 << 10, 1 << 20} {
		name := fmt.Sprintf("bench-%d", size)
		n := int64(mib<<20) / int64(size)
		w, err := dataset.Create(ctx, e.cl, name, []dataset.Column{{Name: "id", Type: dataset.Int64}, {Name: "data", Type: dataset.Binary}}, dataset.WriterOptions{})
		if err != nil {
			b.Fatal(err)
		}
		data := make([]byte, size)
		for i := range n {
			data[0] = byte(i)
			if err := w.Add(i, data); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := w.Close(); err != nil {
			b.Fatal(err)
		}
		c := Command{Dataset: name, BatchSize: (8 << 20) / size, Shuffle: true, WorldSize: 1}
		b.Run(fmt.Sprintf("flight/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(mib) << 20)
			for range b.N {
				if err := drainTicket(ctx, fc, c.ticket(0)); err != nil {
					b.Fatal(err)
				}
			}
		})
		// Four readers, one per rank of four, at once: the aggregate.
		c4 := c
		c4.WorldSize = 4
		b.Run(fmt.Sprintf("flight4/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(mib) << 20)
			for range b.N {
				errs := make(chan error, 4)
				for r := range 4 {
					go func() { errs <- drainTicket(ctx, fc, c4.ticket(r)) }()
				}
				for range 4 {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("loader/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(mib) << 20)
			d, err := dataset.Open(ctx, e.cl, name)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			for range b.N {
				l, err := d.Loader(c.loaderConfig(4, 64<<20))
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Each(ctx, func(*dataset.Batch) error { return nil }); err != nil {
					b.Fatal(err)
				}
				l.Close()
			}
		})
	}
}

// drainTicket reads a DoGet stream to its end.
func drainTicket(ctx context.Context, fc flight.Client, t *flight.Ticket) error {
	st, err := fc.DoGet(ctx, t)
	if err != nil {
		return err
	}
	r, err := flight.NewRecordReader(st)
	if err != nil {
		return err
	}
	defer r.Release()
	for r.Next() {
	}
	if err := r.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
