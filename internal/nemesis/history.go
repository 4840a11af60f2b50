package nemesis

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"
)

// Op kinds and statuses.
const (
	OpWrite = "write"
	OpRead  = "read"

	StatusOK      = "ok"      // acknowledged: a write took effect, a read returned Value
	StatusInfo    = "info"    // a write that failed or timed out: it may or may not have taken effect
	StatusFail    = "fail"    // a read that failed: it tells nothing, the checker drops it
	StatusCorrupt = "corrupt" // a read that returned bytes that are no whole value of its key
)

// Op is one operation on one key, as the client saw it. Times are
// nanoseconds since the run began.
type Op struct {
	Key    int    `json:"key"`
	Client int    `json:"client"`
	Kind   string `json:"kind"`
	Value  uint64 `json:"value"` // the value written, or read
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	Status string `json:"status"`
	Err    string `json:"err,omitempty"`
	Phase  string `json:"phase"` // setup, run or final
}

func (o Op) String() string {
	return fmt.Sprintf("%s key %d client %d %s %s [%v, %v] %s", o.Phase, o.Key, o.Client, o.Kind, FormatValue(o.Value),
		time.Duration(o.Call), time.Duration(o.Return), o.Status)
}

// Event is something the nemesis or the harness did, or saw.
type Event struct {
	Time   int64  `json:"time"`
	Kind   string `json:"kind"`  // inject, heal, skip, exit, phase, ...
	Fault  string `json:"fault"` // the fault's kind
	Detail string `json:"detail"`
}

// History is a run's record, safe for concurrent use.
type History struct {
	start time.Time

	mu     sync.Mutex
	ops    []Op
	events []Event
}

// NewHistory starts a history now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the time since the history began.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add records an op.
func (h *History) Add(op Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, op)
}

// Event records an event now.
func (h *History) Event(kind, fault, format string, args ...any) Event {
	e := Event{Time: h.Now(), Kind: kind, Fault: fault, Detail: fmt.Sprintf(format, args...)}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
	return e
}

// Ops is a copy of the ops so far.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// Events is a copy of the events so far.
func (h *History) Events() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.events...)
}

// WriteJSONLines writes the history to path, one JSON object a line in
// time order: {"op": {...}} or {"event": {...}}.
func (h *History) WriteJSONLines(path string) error {
	type line struct {
		t     int64
		Op    *Op    `json:"op,omitempty"`
		Event *Event `json:"event,omitempty"`
	}
	var lines []line
	for _, o := range h.Ops() {
		lines = append(lines, line{t: o.Call, Op: &o})
	}
	for _, e := range h.Events() {
		lines = append(lines, line{t: e.Time, Event: &e})
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].t < lines[j].t })
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write history: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			f.Close()
			return fmt.Errorf("write history %s: %w", path, err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write history %s: %w", path, err)
	}
	return f.Close()
}
