package arrowflight

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/sluicefs/sluice/dataset"
	"github.com/sluicefs/sluice/sdk"
)

// open opens the command's dataset and checks the command against it,
// returning the batches' schema. The caller closes the dataset.
func (s *Server) open(ctx context.Context, c Command) (*dataset.Dataset, *arrow.Schema, error) {
	d, err := dataset.Open(ctx, s.cfg.Client, c.Dataset)
	if err != nil {
		if errors.Is(err, sdk.ErrNotExist) {
			return nil, nil, fmt.Errorf("dataset %q does not exist (ListFlights lists them): %w", c.Dataset, sdk.ErrNotExist)
		}
		return nil, nil, err
	}
	schema, err := d.LoaderSchema(c.loaderConfig(s.cfg.Readers, s.cfg.StreamMemory))
	if err == nil && c.State != nil {
		err = d.CheckState(*c.State)
	}
	if err != nil {
		d.Close()
		return nil, nil, badRequest(fmt.Errorf("dataset %s: %w", c.Dataset, err))
	}
	return d, schema, nil
}

// info describes a command's flight over the dataset m describes: its
// schema, and one endpoint per rank whose ticket is the command for that
// rank.
func info(m *dataset.Manifest, schema *arrow.Schema, c Command) *flight.FlightInfo {
	fi := &flight.FlightInfo{
		Schema:           flight.SerializeSchema(schema, memory.DefaultAllocator),
		FlightDescriptor: c.descriptor(),
		TotalRecords:     m.Samples,
		TotalBytes:       m.Bytes(),
		Ordered:          true,
	}
	if c.State != nil {
		fi.TotalRecords -= c.State.Consumed
	}
	if c.DropLast {
		fi.TotalRecords = -1 // the dropped remainder is the loader's to work out
	}
	for r := range c.WorldSize {
		fi.Endpoint = append(fi.Endpoint, &flight.FlightEndpoint{Ticket: c.ticket(r)})
	}
	return fi
}

// ListFlights lists every dataset with its schema, sample count and size;
// each flight's descriptor is the dataset with the default options. A
// criteria expression, when given, is a name prefix.
func (s *Server) ListFlights(crit *flight.Criteria, stream flight.FlightService_ListFlightsServer) error {
	ctx := stream.Context()
	ents, err := s.cfg.Client.ReadDir(ctx, "/datasets")
	if errors.Is(err, sdk.ErrNotExist) {
		return nil // no dataset yet
	}
	if err != nil {
		return statusOf(fmt.Errorf("list datasets: %w", err), codes.Unavailable)
	}
	prefix := string(crit.GetExpression())
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasPrefix(name, prefix) {
			continue // an import in progress or abandoned, or not asked for
		}
		// The manifest says all a listing does; the index and shards
		// wait for a stream.
		m, err := dataset.ReadManifest(ctx, s.cfg.Client, name)
		var schema *arrow.Schema
		if err == nil {
			schema, err = m.Schema()
		}
		if err != nil {
			s.cfg.Logger.Warn("arrowflight: list: dataset not readable", "dataset", name, "err", err)
			continue
		}
		fi := info(m, schema, datasetCommand(name))
		if err := stream.Send(fi); err != nil {
			return err
		}
	}
	return nil
}

// GetFlightInfo answers a descriptor (a Command, or a dataset's path) with
// the flight's schema and one endpoint per rank.
func (s *Server) GetFlightInfo(ctx context.Context, desc *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	c, err := commandOf(desc)
	if err != nil {
		return nil, statusOf(err, codes.InvalidArgument)
	}
	d, schema, err := s.open(ctx, c)
	if err != nil {
		return nil, statusOf(err, codes.Unavailable)
	}
	defer d.Close()
	return info(d.Manifest(), schema, c), nil
}

// GetSchema answers a descriptor with the schema of its batches.
func (s *Server) GetSchema(ctx context.Context, desc *flight.FlightDescriptor) (*flight.SchemaResult, error) {
	fi, err := s.GetFlightInfo(ctx, desc)
	if err != nil {
		return nil, err
	}
	return &flight.SchemaResult{Schema: fi.Schema}, nil
}

// DoGet streams the ticket's rank of the epoch in loader order. Each batch
// is written from the loader's buffers and carries the loader state after
// it (dataset.State as JSON) as app metadata. The client's flow control
// is the backpressure: a slow reader stalls gRPC's send, which stalls the
// loader's read-ahead at its memory budget.
func (s *Server) DoGet(t *flight.Ticket, stream flight.FlightService_DoGetServer) error {
	c, err := parseCommand(t.GetTicket(), "ticket")
	if err != nil {
		return statusOf(err, codes.InvalidArgument)
	}
	release, err := s.acquire()
	if err != nil {
		return statusOf(err, codes.ResourceExhausted)
	}
	defer release()
	ctx := stream.Context()
	d, schema, err := s.open(ctx, c)
	if err != nil {
		return statusOf(err, codes.Unavailable)
	}
	defer d.Close()
	l, err := d.Loader(c.loaderConfig(s.cfg.Readers, s.cfg.StreamMemory))
	if err != nil {
		return statusOf(fmt.Errorf("dataset %s: %w", c.Dataset, err), codes.Internal)
	}
	defer l.Close() // after the batches are released (Each) and the writer closed
	if c.State != nil {
		if err := l.Resume(*c.State); err != nil {
			return statusOf(badRequest(err), codes.InvalidArgument)
		}
	}
	w := newRecordSender(stream, schema)
	err = l.Each(ctx, func(b *dataset.Batch) error {
		meta, err := json.Marshal(b.State())
		if err != nil {
			return err
		}
		return w.write(b.RecordBatch, meta)
	})
	if err != nil {
		w.close()
		return statusOf(fmt.Errorf("dataset %s rank %d of %d: %w", c.Dataset, c.Rank, c.WorldSize, err), codes.Unavailable)
	}
	if err := w.close(); err != nil {
		return statusOf(fmt.Errorf("dataset %s: end of stream: %w", c.Dataset, err), codes.Unavailable)
	}
	return nil
}

// PutResult is the app metadata of DoPut's one answer (JSON).
type PutResult struct {
	Dataset string `json:"dataset"`
	Samples int64  `json:"samples"`
	Hash    string `json:"hash"`
}

// DoPut imports the stream's record batches as a new dataset named by its
// descriptor (a Command's dataset, or a path); the dataset appears when
// the stream has ended and every sample is written, and not at all if
// anything fails.
func (s *Server) DoPut(stream flight.FlightService_DoPutServer) error {
	release, err := s.acquire()
	if err != nil {
		return statusOf(err, codes.ResourceExhausted)
	}
	defer release()
	r, err := flight.NewRecordReader(stream)
	if err != nil {
		return statusOf(fmt.Errorf("put: reading the stream's schema: %w", err), codes.InvalidArgument)
	}
	defer r.Release()
	c, err := commandOf(r.LatestFlightDescriptor())
	if err != nil {
		return statusOf(err, codes.InvalidArgument)
	}
	m, err := dataset.ImportStream(stream.Context(), s.cfg.Client, r, "a Flight DoPut stream", c.Dataset, dataset.ImportOptions{})
	if err != nil {
		return statusOf(err, codes.InvalidArgument)
	}
	s.cfg.Logger.Info("arrowflight: imported", "dataset", m.Name, "samples", m.Samples)
	meta, _ := json.Marshal(PutResult{Dataset: m.Name, Samples: m.Samples, Hash: m.Hash})
	return stream.Send(&flight.PutResult{AppMetadata: meta})
}
