package verbs

import (
	"errors"
	"net"
	"testing"

	"github.com/sluicefs/sluice/fabric"
)

func validQP() qpInfo {
	q := qpInfo{QPN: 0x1234, PSN: 0xabcde, LID: 7, MTU: 5, Port: 1, SendCredits: 64, MsgSize: 64 << 10, OneSided: 16, Region: 9}
	for i := range q.GID {
		q.GID[i] = byte(i * 3)
	}
	return q
}

func TestQPInfoRoundTrip(t *testing.T) {
	q := validQP()
	b := q.marshal()
	if len(b) != qpInfoSize {
		t.Fatalf("encoded %d bytes, want %d", len(b), qpInfoSize)
	}
	got, err := parseQPInfo(b)
	if err != nil {
		t.Fatal(err)
	}
	if got != q {
		t.Fatalf("decoded %+v, encoded %+v", got, q)
	}
}

func TestQPInfoRefusesBadInput(t *testing.T) {
	cases := map[string]func(*qpInfo){
		"zero qpn":      func(q *qpInfo) { q.QPN = 0 },
		"qpn > 24 bits": func(q *qpInfo) { q.QPN = 1 << 24 },
		"psn > 24 bits": func(q *qpInfo) { q.PSN = 1 << 24 },
		"mtu 0":         func(q *qpInfo) { q.MTU = 0 },
		"mtu 6":         func(q *qpInfo) { q.MTU = 6 },
		"no credits":    func(q *qpInfo) { q.SendCredits = 0 },
		"no one-sided":  func(q *qpInfo) { q.OneSided = 0 },
		"tiny messages": func(q *qpInfo) { q.MsgSize = 100 },
	}
	for name, edit := range cases {
		q := validQP()
		edit(&q)
		if _, err := parseQPInfo(q.marshal()); !errors.Is(err, fabric.ErrProtocol) {
			t.Errorf("%s: got %v, want ErrProtocol", name, err)
		}
	}
	b := validQP().marshal()
	for name, bad := range map[string][]byte{
		"short":   b[:len(b)-1],
		"long":    append(append([]byte(nil), b...), 0),
		"magic":   append([]byte("XXXX"), b[4:]...),
		"version": append(append([]byte(nil), b[:4]...), append([]byte{9}, b[5:]...)...),
	} {
		if _, err := parseQPInfo(bad); !errors.Is(err, fabric.ErrProtocol) {
			t.Errorf("%s: got %v, want ErrProtocol", name, err)
		}
	}
}

func TestMsgHeader(t *testing.T) {
	b := make([]byte, msgHeaderSize+5)
	h := msgHeader{typ: msgReply, status: fabric.CodeOutOfBounds, credits: 17, id: 1 << 40, timeout: 5e9}
	h.put(b)
	copy(b[msgHeaderSize:], "hello")
	got, body, err := parseMsg(b)
	if err != nil || got != h || string(body) != "hello" {
		t.Fatalf("got %+v %q %v, want %+v", got, body, err, h)
	}
	for name, edit := range map[string]func([]byte) []byte{
		"short":          func(b []byte) []byte { return b[:10] },
		"type 0":         func(b []byte) []byte { b[0] = 0; return b },
		"type 9":         func(b []byte) []byte { b[0] = 9; return b },
		"status on call": func(b []byte) []byte { b[0] = msgCall; return b },
	} {
		bb := append([]byte(nil), b...)
		if _, _, err := parseMsg(edit(bb)); !errors.Is(err, fabric.ErrProtocol) {
			t.Errorf("%s: got %v, want ErrProtocol", name, err)
		}
	}
}

func TestCallBody(t *testing.T) {
	m, req, err := callBody(append([]byte{4}, "echo body"...))
	if err != nil || m != "echo" || string(req) != " body" {
		t.Fatalf("got %q %q %v", m, req, err)
	}
	for _, bad := range [][]byte{nil, {0}, {9, 'a'}} {
		if _, _, err := callBody(bad); !errors.Is(err, fabric.ErrBadRequest) {
			t.Errorf("callBody(%v): %v, want ErrBadRequest", bad, err)
		}
	}
}

func TestKeys(t *testing.T) {
	k := makeKey(0xdeadbeef, 42)
	if rkeyOf(k) != 0xdeadbeef || uint32(k) != 42 {
		t.Fatalf("key %#x", k)
	}
}

// TestExchange: both ends of a bootstrap connection learn each other's
// queue-pair parameters; garbage is refused.
func TestExchange(t *testing.T) {
	a, b := tcpPair(t)
	qa, qb := validQP(), validQP()
	qb.QPN, qb.SendCredits = 0x999, 8
	got := make(chan qpInfo, 1)
	go func() {
		q, err := exchange(b, qb)
		if err != nil {
			t.Error(err)
		}
		got <- q
	}()
	q, err := exchange(a, qa)
	if err != nil || q != qb {
		t.Fatalf("dialer got %+v, %v; want %+v", q, err, qb)
	}
	if q := <-got; q != qa {
		t.Fatalf("listener got %+v, want %+v", q, qa)
	}

	c, d := tcpPair(t)
	d.Write([]byte{3, 'a', 'b', 'c'})
	if _, err := exchange(c, qa); !errors.Is(err, fabric.ErrProtocol) {
		t.Fatalf("garbage queue-pair info: %v, want ErrProtocol", err)
	}
}

// tcpPair returns two ends of a loopback TCP connection (buffered, unlike
// net.Pipe, as the bootstrap connection is).
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}
