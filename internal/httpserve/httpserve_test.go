package httpserve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, url, auth string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServe: /readyz follows Ready, /metrics serves the gatherer's metrics,
// the API and the document are where they belong, --http-guard's guard
// refuses requests without credentials, and Close stops the server.
func TestServe(t *testing.T) {
	var notReady atomic.Bool
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_test_total", Help: "A test counter."})
	reg.MustRegister(c)
	c.Add(3)
	for _, guard := range []bool{false, true} {
		s, err := Start(Config{Addr: "127.0.0.1:0", Metrics: reg, GuardAll: guard,
			Ready: func(context.Context) error {
				if notReady.Load() {
					return errors.New("no leader known")
				}
				return nil
			},
			API:        http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "api "+r.URL.Path) }),
			OpenAPI:    []byte(`{"swagger":"2.0"}`),
			Authorized: func(r *http.Request) bool { return r.Header.Get("Authorization") == "Bearer tok" }})
		if err != nil {
			t.Fatal(err)
		}
		base := "http://" + s.Addr
		auth := "Bearer tok"
		if guard {
			for _, p := range []string{"/metrics", "/healthz", "/readyz", "/openapi.json"} {
				if code, _ := get(t, base+p, ""); code != http.StatusUnauthorized {
					t.Errorf("guarded %s without credentials: %d", p, code)
				}
				if code, _ := get(t, base+p, "Bearer wrong"); code != http.StatusUnauthorized {
					t.Errorf("guarded %s with wrong credentials: %d", p, code)
				}
			}
		} else {
			auth = ""
		}
		if code, body := get(t, base+"/metrics", auth); code != 200 || !strings.Contains(body, "sluice_test_total 3") || !strings.Contains(body, "go_goroutines") {
			t.Errorf("/metrics: %d %s", code, body)
		}
		if code, _ := get(t, base+"/healthz", auth); code != 200 {
			t.Errorf("/healthz: %d", code)
		}
		notReady.Store(false)
		if code, _ := get(t, base+"/readyz", auth); code != 200 {
			t.Errorf("/readyz when ready: %d", code)
		}
		notReady.Store(true)
		if code, body := get(t, base+"/readyz", auth); code != http.StatusServiceUnavailable || !strings.Contains(body, "no leader known") {
			t.Errorf("/readyz when not ready: %d %s", code, body)
		}
		if code, body := get(t, base+"/v1/cluster/status", ""); code != 200 || body != "api /v1/cluster/status" {
			t.Errorf("/v1/: %d %s", code, body)
		}
		if code, body := get(t, base+"/openapi.json", auth); code != 200 || body != `{"swagger":"2.0"}` {
			t.Errorf("/openapi.json: %d %s", code, body)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := http.Get(base + "/healthz"); err == nil {
			t.Error("the server answers after Close")
		}
	}
	var none *Server
	if err := none.Close(); err != nil {
		t.Error(err)
	}
}

// TestMetricsCollision: two gatherers reporting the same series still
// give a scrape, and the collision is logged.
func TestMetricsCollision(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_test_gauge", Help: "A test gauge."}))
	var logged strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), nil))
	s, err := Start(Config{Addr: "127.0.0.1:0", Metrics: prometheus.Gatherers{reg, reg}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if code, body := get(t, "http://"+s.Addr+"/metrics", ""); code != 200 || !strings.Contains(body, "sluice_test_gauge 0") {
		t.Errorf("/metrics: %d %s", code, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "level=ERROR") || !strings.Contains(logged.String(), "sluice_test_gauge") {
		t.Errorf("the collision is not logged: %q", logged.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
