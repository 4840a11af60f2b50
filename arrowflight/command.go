package arrowflight

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow/flight"

	"github.com/sluicefs/sluice/dataset"
)

// Command is what a Flight descriptor (type CMD) and a ticket hold, as
// JSON: a dataset and the loader options of the batches wanted. A PATH
// descriptor [NAME] means {"dataset": NAME} with the defaults.
//
//	{"dataset": "imagenet", "batch_size": 256, "shuffle": true, "seed": 7,
//	 "epoch": 0, "rank": 0, "world_size": 4, "columns": ["image", "label"],
//	 "drop_last": false, "index_column": "", "state": {...}}
//
// State is a resume state, as every DoGet batch's app metadata carries it
// (dataset.State as JSON): the stream starts after the batch that carried
// it. GetFlightInfo's endpoints each hold this command with their rank.
type Command struct {
	Dataset     string         `json:"dataset"`
	BatchSize   int            `json:"batch_size,omitempty"` // default DefaultBatchSize
	Shuffle     bool           `json:"shuffle,omitempty"`
	Seed        uint64         `json:"seed,omitempty"`
	Epoch       int64          `json:"epoch,omitempty"`
	Rank        int            `json:"rank,omitempty"`
	WorldSize   int            `json:"world_size,omitempty"` // default 1
	Columns     []string       `json:"columns,omitempty"`
	DropLast    bool           `json:"drop_last,omitempty"`
	IndexColumn string         `json:"index_column,omitempty"`
	State       *dataset.State `json:"state,omitempty"`
}

// DefaultBatchSize is the batch size of a command that names none.
const DefaultBatchSize = 1024

// parseCommand decodes a command from JSON; what names the bytes in errors
// ("descriptor", "ticket").
func parseCommand(b []byte, what string) (Command, error) {
	var c Command
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("%s: not a Sluice command (JSON like {\"dataset\": \"NAME\", \"batch_size\": 256}): %w", what, err)
	}
	if dec.More() {
		return c, fmt.Errorf("%s: trailing data after the JSON command", what)
	}
	if c.Dataset == "" {
		return c, fmt.Errorf("%s: the command names no dataset (\"dataset\": \"NAME\")", what)
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.WorldSize == 0 {
		c.WorldSize = 1
	}
	return c, nil
}

// datasetCommand is the command for dataset name with the defaults.
func datasetCommand(name string) Command {
	return Command{Dataset: name, BatchSize: DefaultBatchSize, WorldSize: 1}
}

// commandOf reads a descriptor: CMD holds a Command, PATH one dataset name.
func commandOf(d *flight.FlightDescriptor) (Command, error) {
	if d == nil {
		return Command{}, fmt.Errorf("descriptor: none sent")
	}
	switch d.Type {
	case flight.DescriptorCMD:
		return parseCommand(d.Cmd, "descriptor")
	case flight.DescriptorPATH:
		if len(d.Path) != 1 || d.Path[0] == "" {
			return Command{}, fmt.Errorf("descriptor: a path names one dataset, got %q", d.Path)
		}
		return datasetCommand(d.Path[0]), nil
	}
	return Command{}, fmt.Errorf("descriptor: type %v; use CMD (a JSON command) or PATH (a dataset name)", d.Type)
}

// loaderConfig is the loader a command asks for, reading with readers
// batches in flight within prefetch bytes.
func (c Command) loaderConfig(readers int, prefetch int64) dataset.LoaderConfig {
	return dataset.LoaderConfig{BatchSize: c.BatchSize, Shuffle: c.Shuffle, Seed: c.Seed, Epoch: c.Epoch,
		Rank: c.Rank, WorldSize: c.WorldSize, Columns: c.Columns, DropLast: c.DropLast,
		IndexColumn: c.IndexColumn, Readers: readers, Prefetch: prefetch}
}

// ticket is the command as a ticket for rank r.
func (c Command) ticket(r int) *flight.Ticket {
	c.Rank = r
	b, _ := json.Marshal(c)
	return &flight.Ticket{Ticket: b}
}

func (c Command) descriptor() *flight.FlightDescriptor {
	b, _ := json.Marshal(c)
	return &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: b}
}
