package handshake

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/sluicefs/sluice/fabric"
)

var secret = []byte("handshake test secret")

type result struct {
	id  fabric.NodeID
	lim Limits
	err error
}

func run(t *testing.T, dialSecret, listenSecret []byte) (dialer, listener result) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	lc := make(chan result, 1)
	go func() {
		id, lim, err := Accept(b, listenSecret, "listener", Limits{MaxMessage: 1000, MaxInFlight: 3})
		if err != nil {
			b.Close()
		}
		lc <- result{id, lim, err}
	}()
	id, lim, err := Dial(a, dialSecret, "dialer", Limits{MaxMessage: 2000, MaxInFlight: 5})
	if err != nil {
		a.Close()
	}
	return result{id, lim, err}, <-lc
}

func TestMutual(t *testing.T) {
	d, l := run(t, secret, secret)
	if d.err != nil || d.id != "listener" || d.lim != (Limits{MaxMessage: 1000, MaxInFlight: 3}) {
		t.Fatalf("dialer: %+v", d)
	}
	if l.err != nil || l.id != "dialer" || l.lim != (Limits{MaxMessage: 2000, MaxInFlight: 5}) {
		t.Fatalf("listener: %+v", l)
	}
}

func TestWrongSecret(t *testing.T) {
	d, l := run(t, []byte("not the secret"), secret)
	if !errors.Is(d.err, fabric.ErrAuth) {
		t.Fatalf("dialer with the wrong secret: %v, want ErrAuth", d.err)
	}
	if l.err == nil {
		t.Fatal("listener accepted a dialer with the wrong secret")
	}
}

// TestReplayRefused: a dialer that replays a recorded exchange fails,
// because the listener's nonce is fresh each time.
func TestReplayRefused(t *testing.T) {
	a, b := net.Pipe()
	var rec bytes.Buffer
	go func() {
		Accept(b, secret, "listener", Limits{MaxMessage: 1000, MaxInFlight: 3})
		b.Close()
	}()
	rw := struct {
		io.Reader
		io.Writer
	}{a, io.MultiWriter(a, &rec)}
	if _, _, err := Dial(rw, secret, "dialer", Limits{MaxMessage: 2000, MaxInFlight: 5}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	c, d := net.Pipe()
	defer c.Close()
	errc := make(chan error, 1)
	go func() {
		_, _, err := Accept(d, secret, "listener", Limits{MaxMessage: 1000, MaxInFlight: 3})
		d.Close()
		errc <- err
	}()
	go io.Copy(io.Discard, c)
	c.Write(rec.Bytes())
	if err := <-errc; !errors.Is(err, fabric.ErrAuth) {
		t.Fatalf("replayed handshake: %v, want ErrAuth", err)
	}
}

// FuzzHandshake plays an arbitrary peer against both sides: without the
// secret neither side may ever succeed.
func FuzzHandshake(f *testing.F) {
	var valid bytes.Buffer
	writeHello(&valid, hello{id: "peer"})
	f.Add(valid.Bytes())
	f.Add(append(valid.Bytes(), make([]byte, 8+macSize)...))
	f.Add([]byte("SLCF\x01\xff"))
	lim := Limits{MaxMessage: 1 << 20, MaxInFlight: 8}
	f.Fuzz(func(t *testing.T, in []byte) {
		rw := struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(in), io.Discard}
		if _, _, err := Accept(rw, secret, "listener", lim); err == nil {
			t.Fatal("listener accepted a peer without the secret")
		}
		rw.Reader = bytes.NewReader(in)
		if _, _, err := Dial(rw, secret, "dialer", lim); err == nil {
			t.Fatal("dialer accepted a listener without the secret")
		}
	})
}
