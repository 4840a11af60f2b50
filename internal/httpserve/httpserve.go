package httpserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Config says what a process serves. Zero fields serve nothing of theirs.
type Config struct {
	// Addr is the listen address ("127.0.0.1:0" picks a port).
	Addr string
	// Metrics is gathered for /metrics; nil serves Go's and the process's
	// collectors only.
	Metrics prometheus.Gatherer
	// Ready says whether the process is serving: nil for yes, else why not
	// (/readyz answers 503 with the reason). Nil Ready: ready when alive.
	Ready func(context.Context) error
	// API, when set, is served under /v1/ (the REST gateway), and OpenAPI,
	// when set, at /openapi.json.
	API     http.Handler
	OpenAPI []byte
	// Authorized checks a request's credentials (the cluster token in its
	// Authorization header). It guards /metrics, /healthz, /readyz and
	// /openapi.json when GuardAll is set. The API under /v1/ is guarded
	// by the services it forwards to, as their gRPC calls are.
	Authorized func(*http.Request) bool
	GuardAll   bool
	Logger     *slog.Logger
}

// Server is a running HTTP server; Close stops it.
type Server struct {
	// Addr is the address it listens on.
	Addr string
	srv  *http.Server
	done chan struct{}
	once sync.Once
	err  error
}

// ReadyTimeout bounds one /readyz test.
const ReadyTimeout = 2 * time.Second

// Start listens on cfg.Addr and serves until Close.
func Start(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Authorized == nil {
		cfg.Authorized = func(*http.Request) bool { return false }
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("http: listen %s: %w", cfg.Addr, err)
	}
	s := &Server{Addr: ln.Addr().String(), done: make(chan struct{})}
	s.srv = &http.Server{Handler: Handler(cfg), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Error("http server stopped", "addr", s.Addr, "err", err)
		}
	}()
	return s, nil
}

// Close stops the server: requests in progress get a few seconds to end.
// Closing again, or closing a nil Server (no address to serve on), does
// nothing.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			s.err = errors.Join(err, s.srv.Close())
		}
		<-s.done
	})
	return s.err
}

// Handler is the mux Start serves.
func Handler(cfg Config) http.Handler {
	guard := func(h http.Handler) http.Handler {
		if !cfg.GuardAll {
			return h
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if cfg.Authorized == nil || !cfg.Authorized(r) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
				http.Error(w, "missing or wrong cluster token", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gatherers := prometheus.Gatherers{reg}
	if cfg.Metrics != nil {
		gatherers = append(gatherers, cfg.Metrics)
	}
	mux := http.NewServeMux()
	// A collector that fails (or two that collide) costs its series, not
	// the scrape, and says so in the log.
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	mux.Handle("GET /metrics", guard(promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError)})))
	mux.Handle("GET /healthz", guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})))
	mux.Handle("GET /readyz", guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cfg.Ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
			defer cancel()
			if err := cfg.Ready(ctx); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ready")
	})))
	if cfg.OpenAPI != nil {
		mux.Handle("GET /openapi.json", guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(cfg.OpenAPI)
		})))
	}
	if cfg.API != nil {
		mux.Handle("/v1/", cfg.API)
	}
	return mux
}
