package routing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// WatchedRouting is a Provider fed by mgmtd's watch stream:
// storage nodes and clients route by it. It reconnects when the stream
// breaks, and only ever moves to a newer map.
type WatchedRouting struct {
	client mgmtdpb.MgmtdClient
	log    *slog.Logger

	mu      sync.Mutex
	r       *Routing
	changed chan struct{}
	err     error // a refusal that retrying cannot cure (wrong token)
	last    error // the last stream's error, while no map has come

	cancel context.CancelFunc
	done   chan struct{}
}

// WatchOptions tune Watch.
type WatchOptions struct {
	Logger *slog.Logger
	// Unreachable, when positive, bounds how long the wait for the first
	// map goes on while the last attempt failed as unavailable (connection
	// refused, a name that does not resolve): the watch then gives up with
	// that error instead of waiting out its context. A replica restarting
	// within it is waited for.
	Unreachable time.Duration
}

// Watch starts watching; it returns once the first map arrived (or ctx
// ended). The token comes with client's connection (auth.Credentials).
func Watch(ctx context.Context, client mgmtdpb.MgmtdClient, log *slog.Logger) (*WatchedRouting, error) {
	return WatchWith(ctx, client, WatchOptions{Logger: log})
}

// WatchWith is Watch with options. An error says why no map came: the
// refusal (a wrong token), the stream's last error (unreachable), or the
// end of ctx with the last error seen before it.
func WatchWith(ctx context.Context, client mgmtdpb.MgmtdClient, o WatchOptions) (*WatchedRouting, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &WatchedRouting{client: client, log: log, changed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go w.run(wctx)
	var giveUp <-chan time.Time
	if o.Unreachable > 0 {
		t := time.NewTimer(o.Unreachable)
		defer t.Stop()
		giveUp = t.C
	}
	for {
		// The channel is taken before the look, or a map arriving between
		// the two would be a wake-up missed, and the wait endless.
		changed := w.Changed()
		if w.Routing() != nil {
			return w, nil
		}
		if err := w.failure(); err != nil {
			w.Close()
			return nil, fmt.Errorf("watch cluster map: %w", err)
		}
		select {
		case <-changed:
		case <-giveUp:
			giveUp = nil
			if last := w.lastError(); status.Code(last) == codes.Unavailable {
				w.Close()
				return nil, fmt.Errorf("watch cluster map: unreachable: %w", last)
			}
		case <-ctx.Done():
			w.Close()
			err := context.Cause(ctx)
			if last := w.lastError(); last != nil {
				return nil, fmt.Errorf("watch cluster map: %w (last: %v)", err, last)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return nil, fmt.Errorf("watch cluster map: no answer: %w", err)
			}
			return nil, fmt.Errorf("watch cluster map: %w", err)
		}
	}
}

// firstMapWait bounds how long a new watch stream may go without its first
// map before it is replaced.
var firstMapWait = 5 * time.Second

func (w *WatchedRouting) run(ctx context.Context) {
	defer close(w.done)
	for ctx.Err() == nil {
		// The server sends the current map as soon as a stream opens; a
		// stream that brings nothing within firstMapWait is taken for
		// broken, abandoned and opened again.
		sctx, scancel := context.WithCancel(ctx)
		var first atomic.Bool
		timer := time.AfterFunc(firstMapWait, func() {
			if !first.Load() {
				w.log.Warn("no cluster map on the watch stream; opening another", "waited", firstMapWait)
				scancel()
			}
		})
		stream, err := w.client.WatchClusterMap(sctx, &mgmtdpb.Empty{})
		for err == nil {
			var m *mgmtdpb.ClusterMap
			if m, err = stream.Recv(); err == nil {
				first.Store(true)
				w.set(FromMap(m))
			}
		}
		timer.Stop()
		abandoned := sctx.Err() != nil && ctx.Err() == nil
		scancel()
		w.mu.Lock()
		if w.r == nil && ctx.Err() == nil {
			w.last = err
			if abandoned { // a stream that said nothing, or a dial that hangs
				w.last = fmt.Errorf("no answer within %v", firstMapWait)
			}
		}
		w.mu.Unlock()
		if c := status.Code(err); c == codes.Unauthenticated || c == codes.PermissionDenied {
			w.mu.Lock()
			w.err = err
			close(w.changed)
			w.changed = make(chan struct{})
			w.mu.Unlock()
			return
		}
		if ctx.Err() == nil {
			w.log.Debug("cluster map watch broke; reconnecting", "err", err)
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}
}

func (w *WatchedRouting) set(r *Routing) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.r != nil && r.Version <= w.r.Version {
		return
	}
	w.r = r
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *WatchedRouting) lastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

func (w *WatchedRouting) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Routing returns the newest routing seen (nil before the first).
func (w *WatchedRouting) Routing() *Routing {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.r
}

// Changed returns a channel closed at the next newer routing.
func (w *WatchedRouting) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// Close stops watching.
func (w *WatchedRouting) Close() {
	w.cancel()
	<-w.done
}
