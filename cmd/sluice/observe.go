package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice/auth"
	"github.com/sluicefs/sluice/internal/httpserve"
	"github.com/sluicefs/sluice/proto/openapi"
)

// logFlags are the root's --log-level and --log-format: every command logs
// through the one slog logger they make, on standard error, which becomes
// slog's default (Pebble's and Raft's warnings and errors reach it too).
type logFlags struct{ level, format string }

func (f *logFlags) add(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.level, "log-level", "info", "log at this level and above: debug, info, warn or error")
	cmd.PersistentFlags().StringVar(&f.format, "log-format", "text", "log format: text or json")
}

// logger is the process's logger, writing to w.
func (f *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(f.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", f.level, err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch f.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: text or json", f.format)
}

// httpFlags are --http and --http-guard, for every long-running command.
type httpFlags struct {
	addr  string
	guard bool
}

func (f *httpFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.addr, "http", "", "serve /metrics, /healthz and /readyz (and, on meta replicas, the REST API and /openapi.json) on this address, e.g. 127.0.0.1:7480 (default: no HTTP)")
	cmd.Flags().BoolVar(&f.guard, "http-guard", false, "require the cluster token on /metrics, /healthz, /readyz and /openapi.json too (the REST API always requires it)")
}

// httpSources is what one process serves over HTTP.
type httpSources struct {
	metrics prometheus.Gatherer
	ready   func(context.Context) error
	// api, when set, makes the REST gateway (meta replicas and sluice dev);
	// its handler and the OpenAPI document are served under /v1/ and at
	// /openapi.json.
	api func() (http.Handler, error)
}

// serve starts the process's HTTP server when --http is set (a nil
// server, whose Close does nothing, when not); the caller closes it before
// what it reports on.
func (f *httpFlags) serve(cmd *cobra.Command, token string, src httpSources) (*httpserve.Server, error) {
	if f.addr == "" {
		return nil, nil
	}
	cfg := httpserve.Config{Addr: f.addr, Metrics: src.metrics, Ready: src.ready, GuardAll: f.guard, Logger: slog.Default(),
		Authorized: func(r *http.Request) bool { return auth.Bearer(token, r.Header.Get("Authorization")) }}
	if src.api != nil {
		api, err := src.api()
		if err != nil {
			return nil, fmt.Errorf("rest gateway: %w", err)
		}
		doc, err := openapi.Document()
		if err != nil {
			return nil, err
		}
		cfg.API, cfg.OpenAPI = api, doc
	}
	s, err := httpserve.Start(cfg)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "sluice: http serving on %s\n", s.Addr)
	return s, nil
}
