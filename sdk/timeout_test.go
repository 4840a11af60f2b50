package sdk

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric/fabrictest"
)

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// Connect to an address where no cluster runs fails within seconds and
// says why, rather than waiting out its context with "context canceled".
func TestConnectFailsFast(t *testing.T) {
	for _, tc := range []struct {
		name, addr, want string
		is               error
	}{
		{"refused", closedPort(t), "refused", ErrUnreachable},
		{"malformed", "localhost-no-port", "malformed address", nil},
		{"bad port", "127.0.0.1:http", "malformed address", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			c, err := Connect(context.Background(), Config{Cluster: tc.addr, Token: "x"})
			if err == nil {
				c.Close()
				t.Fatal("connected to nothing")
			}
			if took := time.Since(start); took > 2*unreachableWait {
				t.Errorf("took %v", took)
			}
			if !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("error %q: want %q", err, tc.want)
			}
		})
	}
}

// Connect to something that takes the connection and never answers fails
// at OpTimeout, saying it timed out.
func TestConnectTimesOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accept and say nothing
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start := time.Now()
	_, err = Connect(context.Background(), Config{Cluster: ln.Addr().String(), Token: "x", OpTimeout: time.Second})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v: want ErrTimeout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v", took)
	}
}

// A cluster gone mid-read fails ReadAt (which takes no context) within
// OpTimeout, and Close of a written file too.
func TestReadAtClusterGone(t *testing.T) {
	c := startCluster(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := Connect(ctx, Config{Cluster: c.Addr, Token: c.Token, OpTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	data := fabrictest.RandBytes(1, 200<<10)
	if err := cl.WriteFile(ctx, "/f", data); err != nil {
		t.Fatal(err)
	}
	f, err := cl.Open(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	w, err := cl.Create(ctx, "/g")
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, len(data))
	if _, err := f.ReadAt(p, 0); err != nil {
		t.Fatal(err)
	}
	c.Close()
	start := time.Now()
	if _, err := f.ReadAt(p, 0); !errors.Is(err, ErrTimeout) {
		t.Errorf("read from a stopped cluster: %v", err)
	}
	if _, err := w.WriteAt(data, 0); err == nil {
		t.Error("write to a stopped cluster succeeded")
	}
	if err := w.Close(); err == nil {
		t.Error("close on a stopped cluster succeeded")
	}
	if _, err := cl.Stat(context.Background(), "/f"); err == nil {
		t.Error("stat on a stopped cluster succeeded")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("four calls took %v with a 1 s OpTimeout", took)
	}
}
