package main

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The last error is per calling thread: an export runs on its caller's
// thread, so what it records here is what that caller reads next.
static __thread char *sluice_err;

static void sluice_set_error(char *msg) {
	free(sluice_err);
	sluice_err = msg;
}

static const char *sluice_get_error(void) {
	return sluice_err ? sluice_err : "";
}
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/cdata"

	"github.com/sluicefs/sluice/dataset"
	"github.com/sluicefs/sluice/sdk"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {}

// handles maps the uint64s C holds to Go objects.
var handles struct {
	sync.Mutex
	next atomic.Uint64
	m    map[uint64]any
}

func put(v any) C.uint64_t {
	h := handles.next.Add(1)
	handles.Lock()
	if handles.m == nil {
		handles.m = map[uint64]any{}
	}
	handles.m[h] = v
	handles.Unlock()
	return C.uint64_t(h)
}

func get[T any](h C.uint64_t) (T, error) {
	handles.Lock()
	v, ok := handles.m[uint64(h)]
	handles.Unlock()
	t, isT := v.(T)
	if !ok {
		return t, fmt.Errorf("handle %d: not open (closed, or never returned by this library)", uint64(h))
	}
	if !isT {
		return t, fmt.Errorf("handle %d is a %T, not a %T", uint64(h), v, t)
	}
	return t, nil
}

// call runs fn, turning an error or a panic into -1 and the thread's last
// error.
func call(fn func() error) (rc C.int) {
	defer func() {
		if p := recover(); p != nil {
			setError(fmt.Errorf("internal error (a bug in sluice): %v\n%s", p, debug.Stack()))
			rc = -1
		}
	}()
	if err := fn(); err != nil {
		setError(err)
		return -1
	}
	return 0
}

func setError(err error) { C.sluice_set_error(C.CString(err.Error())) }

//export sluice_last_error
func sluice_last_error() *C.char { return C.sluice_get_error() }

var cVersion = C.CString(version)

//export sluice_version
func sluice_version() *C.char { return cVersion }

// sluice_procs sets how many threads at once the library's Go runtime
// runs Go code on (runtime.GOMAXPROCS) when n > 0, and returns the number
// it had. A process of several that share the machine's cores (a torch
// worker) does better on one: the runtime then has fewer threads to wake
// and park around each call from Python.
//
//export sluice_procs
func sluice_procs(n C.int) C.int {
	if n > 0 {
		return C.int(runtime.GOMAXPROCS(int(n)))
	}
	return C.int(runtime.GOMAXPROCS(0))
}

// calls holds the context every call of this ABI runs under (the client's
// OpTimeout bounds each). sluice_cancel ends it, cutting short every call
// in flight, and the calls after it get a fresh one: how a caller blocked
// in a call is interrupted (Python's Ctrl-C). The ABI is per process, so
// the state is.
var calls struct {
	sync.Mutex
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// errInterrupted is the cause of calls ended by sluice_cancel.
var errInterrupted = errors.New("sluice: interrupted")

// ctx is the context of a call starting now.
func ctx() context.Context {
	calls.Lock()
	defer calls.Unlock()
	if calls.ctx == nil {
		calls.ctx, calls.cancel = context.WithCancelCause(context.Background())
	}
	return calls.ctx
}

// sluice_cancel ends every call in flight (they fail with "interrupted");
// calls made afterwards run as usual.
//
//export sluice_cancel
func sluice_cancel() C.int {
	return call(func() error {
		calls.Lock()
		defer calls.Unlock()
		if calls.cancel != nil {
			calls.cancel(errInterrupted)
		}
		calls.ctx, calls.cancel = nil, nil
		return nil
	})
}

// interrupted names sluice_cancel in err when it is what ended c.
func interrupted(c context.Context, err error) error {
	if err != nil && context.Cause(c) == errInterrupted && !errors.Is(err, errInterrupted) {
		return fmt.Errorf("%w: %w", errInterrupted, err)
	}
	return err
}

// sluice_connect connects; opTimeoutNs is sdk.Config.OpTimeout in
// nanoseconds (0: the default, 30 s; negative: none).
//
//export sluice_connect
func sluice_connect(cluster, token *C.char, opTimeoutNs C.int64_t, out *C.uint64_t) C.int {
	return call(func() error {
		cx := ctx()
		c, err := sdk.Connect(cx, sdk.Config{Cluster: C.GoString(cluster), Token: C.GoString(token),
			OpTimeout: time.Duration(opTimeoutNs)})
		if err != nil {
			return interrupted(cx, err)
		}
		*out = put(c)
		return nil
	})
}

// sluice_close closes any handle. Batches already exported stay valid.
//
//export sluice_close
func sluice_close(h C.uint64_t) C.int {
	return call(func() error {
		handles.Lock()
		v, ok := handles.m[uint64(h)]
		handles.Unlock()
		if !ok {
			return fmt.Errorf("close handle %d: not open", uint64(h))
		}
		if err := v.(io.Closer).Close(); err != nil {
			return err // still open (a dataset with loaders, say)
		}
		handles.Lock()
		delete(handles.m, uint64(h))
		handles.Unlock()
		return nil
	})
}

//export sluice_dataset_open
func sluice_dataset_open(client C.uint64_t, name *C.char, out *C.uint64_t) C.int {
	return call(func() error {
		c, err := get[*sdk.Client](client)
		if err != nil {
			return err
		}
		d, err := dataset.Open(ctx(), c, C.GoString(name))
		if err != nil {
			return err
		}
		*out = put(d)
		return nil
	})
}

//export sluice_dataset_len
func sluice_dataset_len(ds C.uint64_t, out *C.int64_t) C.int {
	return call(func() error {
		d, err := get[*dataset.Dataset](ds)
		if err != nil {
			return err
		}
		*out = C.int64_t(d.Len())
		return nil
	})
}

// sluice_dataset_manifest copies the manifest as JSON into buf (cap bytes,
// NUL-terminated) and sets *needed to its size plus one.
//
//export sluice_dataset_manifest
func sluice_dataset_manifest(ds C.uint64_t, buf *C.char, capacity C.int64_t, needed *C.int64_t) C.int {
	return call(func() error {
		d, err := get[*dataset.Dataset](ds)
		if err != nil {
			return err
		}
		b, err := json.Marshal(d.Manifest())
		if err != nil {
			return err
		}
		return copyOut(b, buf, capacity, needed)
	})
}

// copyOut writes b and a NUL into buf when it fits; *needed says the room
// it takes either way.
func copyOut(b []byte, buf *C.char, capacity C.int64_t, needed *C.int64_t) error {
	*needed = C.int64_t(len(b) + 1)
	if int64(capacity) < int64(len(b)+1) {
		return nil // the caller retries with *needed bytes
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), len(b)+1)
	copy(dst, b)
	dst[len(b)] = 0
	return nil
}

func columns(js *C.char) ([]string, error) {
	var cols []string
	if s := C.GoString(js); s != "" {
		if err := json.Unmarshal([]byte(s), &cols); err != nil {
			return nil, fmt.Errorf("columns %q: want a JSON list of names: %w", s, err)
		}
	}
	return cols, nil
}

// sluice_dataset_take exports the samples at idx[0:n] (columns: a JSON
// list, or empty for all) as an Arrow record batch (struct array + schema).
//
//export sluice_dataset_take
func sluice_dataset_take(ds C.uint64_t, idx *C.int64_t, n C.int64_t, cols *C.char, outArray, outSchema unsafe.Pointer) C.int {
	return call(func() error {
		d, err := get[*dataset.Dataset](ds)
		if err != nil {
			return err
		}
		names, err := columns(cols)
		if err != nil {
			return err
		}
		if n < 0 {
			return fmt.Errorf("take: %d indices", int64(n))
		}
		indices := make([]int64, n)
		if n > 0 {
			copy(indices, unsafe.Slice((*int64)(unsafe.Pointer(idx)), int(n)))
		}
		rec, err := d.Take(ctx(), indices, names...)
		if err != nil {
			return err
		}
		defer rec.Release()
		cdata.ExportArrowRecordBatch(rec, (*cdata.CArrowArray)(outArray), (*cdata.CArrowSchema)(outSchema))
		return nil
	})
}

// loaderOptions are sluice_loader_new's JSON options.
type loaderOptions struct {
	BatchSize   int      `json:"batch_size"`
	Shuffle     bool     `json:"shuffle"`
	Seed        uint64   `json:"seed"`
	Epoch       int64    `json:"epoch"`
	Rank        int      `json:"rank"`
	WorldSize   *int     `json:"world_size"` // 1 when absent; never 0
	Workers     *int     `json:"workers"`    // 1 when absent; never 0
	Worker      int      `json:"worker"`
	DropLast    bool     `json:"drop_last"`
	Columns     []string `json:"columns"`
	IndexColumn string   `json:"index_column"`
	Readers     int      `json:"readers"`
	Prefetch    int64    `json:"prefetch_bytes"`
	Shared      bool     `json:"shared_memory"`
	Agent       string   `json:"agent"` // a local agent's socket: read through its rings
}

//export sluice_loader_new
func sluice_loader_new(ds C.uint64_t, options *C.char, out *C.uint64_t) C.int {
	return call(func() error {
		d, err := get[*dataset.Dataset](ds)
		if err != nil {
			return err
		}
		var o loaderOptions
		dec := json.NewDecoder(strings.NewReader(C.GoString(options)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil {
			return fmt.Errorf("loader options: %w", err)
		}
		// Go's zero means the default; from C a 0 is a mistake (a
		// world size read from an unset variable), not a request for 1.
		world, workers := 1, 1
		if o.WorldSize != nil {
			if world = *o.WorldSize; world < 1 {
				return fmt.Errorf("loader options: world_size %d: must be at least 1", world)
			}
		}
		if o.Workers != nil {
			if workers = *o.Workers; workers < 1 {
				return fmt.Errorf("loader options: workers %d: must be at least 1", workers)
			}
		}
		l, err := d.Loader(dataset.LoaderConfig{BatchSize: o.BatchSize, Shuffle: o.Shuffle, Seed: o.Seed, Epoch: o.Epoch,
			Rank: o.Rank, WorldSize: world, Worker: o.Worker, Workers: workers, DropLast: o.DropLast,
			Columns: o.Columns, IndexColumn: o.IndexColumn, Readers: o.Readers, Prefetch: o.Prefetch,
			SharedMemory: o.Shared, Agent: o.Agent})
		if err != nil {
			return err
		}
		ld := &loader{Loader: l}
		ld.refs.Store(1) // the handle's
		*out = put(ld)
		return nil
	})
}

// loader is a dataset loader with the C side's view of it. Its handle and
// each stream exported from it hold a reference: closing the handle (a
// Python Loader collected once pa.RecordBatchReader.from_stream took its
// stream) leaves the loader running until the last stream is released.
type loader struct {
	*dataset.Loader
	refs atomic.Int64
}

// Close drops the handle's reference.
func (l *loader) Close() error { return l.release() }

func (l *loader) release() error {
	if l.refs.Add(-1) == 0 {
		return l.Loader.Close()
	}
	return nil
}

// sluice_loader_stream exports the rest of the loader's current epoch as
// an ArrowArrayStream; each get_next is the loader's next batch.
//
//export sluice_loader_stream
func sluice_loader_stream(h C.uint64_t, out unsafe.Pointer) C.int {
	return call(func() error {
		l, err := get[*loader](h)
		if err != nil {
			return err
		}
		r := &batchReader{l: l}
		l.refs.Add(1) // released with the stream
		r.refs.Store(1)
		cdata.ExportRecordReader(r, (*cdata.CArrowArrayStream)(out))
		r.Release() // the stream holds its own reference
		return nil
	})
}

//export sluice_loader_state
func sluice_loader_state(h C.uint64_t, buf *C.char, capacity C.int64_t, needed *C.int64_t) C.int {
	return call(func() error {
		l, err := get[*loader](h)
		if err != nil {
			return err
		}
		b, err := json.Marshal(l.State())
		if err != nil {
			return err
		}
		return copyOut(b, buf, capacity, needed)
	})
}

//export sluice_loader_resume
func sluice_loader_resume(h C.uint64_t, state *C.char) C.int {
	return call(func() error {
		l, err := get[*loader](h)
		if err != nil {
			return err
		}
		var s dataset.State
		if err := json.Unmarshal([]byte(C.GoString(state)), &s); err != nil {
			return fmt.Errorf("loader state: %w", err)
		}
		return l.Resume(s)
	})
}

// sluice_loader_wait waits at most timeoutMs milliseconds until the
// loader's next batch would come at once from its stream (read, the epoch
// over, or an error to report), and says so in *ready (1, else 0). Python's
// main thread waits in such short calls, where a signal (Ctrl-C) is seen
// between them, and then reads the batch on its own thread: no hand-off to
// a helper thread for every batch.
//
//export sluice_loader_wait
func sluice_loader_wait(h C.uint64_t, timeoutMs C.int, ready *C.int) C.int {
	return call(func() error {
		l, err := get[*loader](h)
		if err != nil {
			return err
		}
		*ready = 0
		if l.Wait(time.Duration(timeoutMs) * time.Millisecond) {
			*ready = 1
		}
		return nil
	})
}

//export sluice_loader_set_epoch
func sluice_loader_set_epoch(h C.uint64_t, epoch C.int64_t) C.int {
	return call(func() error {
		l, err := get[*loader](h)
		if err != nil {
			return err
		}
		l.SetEpoch(int64(epoch))
		return nil
	})
}

// sluice_loader_memory gives a loader made with shared_memory its memfd
// (-1 for others), the address batches are mapped at here and the size: a
// batch buffer at address p lies at p-addr in the memfd, which another
// process maps through /proc/PID/fd/FD.
//
//export sluice_loader_memory
func sluice_loader_memory(h C.uint64_t, fd *C.int64_t, addr *C.uint64_t, size *C.int64_t) C.int {
	return call(func() error {
		l, err := get[*loader](h)
		if err != nil {
			return err
		}
		f, base, n := l.SharedMemory()
		*fd, *addr, *size = C.int64_t(f), C.uint64_t(base), C.int64_t(n)
		return nil
	})
}

//export sluice_loader_steps
func sluice_loader_steps(h C.uint64_t, out *C.int64_t) C.int {
	return call(func() error {
		l, err := get[*loader](h)
		if err != nil {
			return err
		}
		*out = C.int64_t(l.Steps())
		return nil
	})
}

// batchReader is an array.RecordReader over a loader's epoch: what
// cdata.ExportRecordReader turns into an ArrowArrayStream.
type batchReader struct {
	l    *loader
	refs atomic.Int64
	cur  *dataset.Batch
	err  error
}

func (r *batchReader) Retain() { r.refs.Add(1) }
func (r *batchReader) Release() {
	if r.refs.Add(-1) == 0 {
		if r.cur != nil {
			r.cur.Release()
			r.cur = nil
		}
		r.l.release()
	}
}
func (r *batchReader) Schema() *arrow.Schema { return r.l.Schema() }
func (r *batchReader) Next() bool {
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
	cx := ctx()
	b, err := r.l.Next(cx)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			r.err = interrupted(cx, err)
		}
		return false
	}
	r.cur = b
	return true
}
func (r *batchReader) RecordBatch() arrow.RecordBatch { return r.cur.RecordBatch }
func (r *batchReader) Record() arrow.RecordBatch      { return r.cur.RecordBatch }
func (r *batchReader) Err() error                     { return r.err }

// sluice_file_open opens path for reading, or with write != 0 creates it
// (it must not exist) for writing.
//
//export sluice_file_open
func sluice_file_open(client C.uint64_t, path *C.char, write C.int, out *C.uint64_t) C.int {
	return call(func() error {
		c, err := get[*sdk.Client](client)
		if err != nil {
			return err
		}
		var f *sdk.File
		if write != 0 {
			f, err = c.Create(ctx(), C.GoString(path))
		} else {
			f, err = c.Open(ctx(), C.GoString(path))
		}
		if err != nil {
			return err
		}
		*out = put(f)
		return nil
	})
}

// sluice_file_pread reads up to n bytes at off into buf; *got is the count
// (short only at the end of the file).
//
//export sluice_file_pread
func sluice_file_pread(h C.uint64_t, buf unsafe.Pointer, n, off C.int64_t, got *C.int64_t) C.int {
	return call(func() error {
		f, err := get[*sdk.File](h)
		if err != nil {
			return err
		}
		if n < 0 || off < 0 {
			return fmt.Errorf("pread %s: %d bytes at %d", f.Name(), int64(n), int64(off))
		}
		cx := ctx()
		k, err := f.ReadAtContext(cx, unsafe.Slice((*byte)(buf), int(n)), int64(off))
		err = interrupted(cx, err)
		*got = C.int64_t(k)
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	})
}

//export sluice_file_pwrite
func sluice_file_pwrite(h C.uint64_t, buf unsafe.Pointer, n, off C.int64_t) C.int {
	return call(func() error {
		f, err := get[*sdk.File](h)
		if err != nil {
			return err
		}
		if n < 0 || off < 0 {
			return fmt.Errorf("pwrite %s: %d bytes at %d", f.Name(), int64(n), int64(off))
		}
		cx := ctx()
		_, err = f.WriteAtContext(cx, unsafe.Slice((*byte)(buf), int(n)), int64(off))
		return interrupted(cx, err)
	})
}

//export sluice_file_size
func sluice_file_size(h C.uint64_t, out *C.int64_t) C.int {
	return call(func() error {
		f, err := get[*sdk.File](h)
		if err != nil {
			return err
		}
		*out = C.int64_t(f.Size())
		return nil
	})
}

// sluice_stat copies path's inode as JSON into buf (see copyOut).
//
//export sluice_stat
func sluice_stat(client C.uint64_t, path *C.char, buf *C.char, capacity C.int64_t, needed *C.int64_t) C.int {
	return call(func() error {
		c, err := get[*sdk.Client](client)
		if err != nil {
			return err
		}
		in, err := c.Stat(ctx(), C.GoString(path))
		if err != nil {
			return err
		}
		kind := "FILE"
		switch in.Mode().Type() {
		case fs.ModeDir:
			kind = "DIRECTORY"
		case fs.ModeSymlink:
			kind = "SYMLINK"
		}
		b, err := json.Marshal(map[string]any{"ino": in.Ino(), "type": kind, "mode": in.UnixMode() & 0o7777, "size": in.Size(),
			"nlink": in.Nlink(), "mtime_ns": in.ModTime().UnixNano(), "uid": in.UID(), "gid": in.GID()})
		if err != nil {
			return err
		}
		return copyOut(b, buf, capacity, needed)
	})
}

// sluice_metrics copies the client's metrics as JSON into buf (see
// copyOut): an object of metric name (labels in braces, as Prometheus
// writes them) to value, sdk.Metrics.Snapshot.
//
//export sluice_metrics
func sluice_metrics(client C.uint64_t, buf *C.char, capacity C.int64_t, needed *C.int64_t) C.int {
	return call(func() error {
		c, err := get[*sdk.Client](client)
		if err != nil {
			return err
		}
		m, err := c.Metrics().Snapshot()
		if err != nil {
			return err
		}
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		return copyOut(b, buf, capacity, needed)
	})
}
