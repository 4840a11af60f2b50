package tcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/fabric/internal/handshake"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// countingServer listens with a "count" handler that counts invocations and
// a "block" handler that waits for its context.
func countingServer(t *testing.T, cfg Config) (fabric.Endpoint, *atomic.Int32) {
	t.Helper()
	srv, err := newTransport(t, cfg).Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	var n atomic.Int32
	fabric.Handle(srv, "count", func(ctx context.Context, peer fabric.NodeID, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		n.Add(1)
		return req, nil
	})
	fabric.Handle(srv, "block", func(ctx context.Context, peer fabric.NodeID, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	return srv, &n
}

// rawConn dials srv and runs the handshake with secret, returning the bare
// socket so a test can write any bytes it likes.
func rawConn(t *testing.T, srv fabric.Endpoint, secret []byte) (net.Conn, limits, error) {
	t.Helper()
	nc, err := net.Dial("tcp", string(srv.ID()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	_, lim, err := handshake.Dial(nc, secret, "raw", handshake.Limits{MaxMessage: 1 << 20, MaxInFlight: 16})
	return nc, fromWire(lim), err
}

// encodeFrame encodes a whole frame: header, meta, data and trailer.
func encodeFrame(h header, meta, data []byte) []byte {
	h.metaLen, h.dataLen = uint32(len(meta)), uint32(len(data))
	if len(data) > 0 {
		h.flags |= flagDataCRC
	}
	frame := make([]byte, headerSize)
	h.encode(frame, meta)
	frame = append(append(frame, meta...), data...)
	if len(data) > 0 {
		frame = binary.LittleEndian.AppendUint32(frame, dataCRC([][]byte{data}))
	}
	return frame
}

// callFrame encodes a call to method with body req.
func callFrame(id uint64, method string, req proto.Message) []byte {
	body, _ := proto.Marshal(req)
	meta := make([]byte, 9+len(method))
	meta[8] = byte(len(method))
	copy(meta[9:], method)
	return encodeFrame(header{typ: typeCall, id: id}, append(meta, body...), nil)
}

// expectClosed waits for the server to hang up on nc.
func expectClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, nc)
	if err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Fatalf("server did not close the connection: %v", err)
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

func TestWrongSecretRefused(t *testing.T) {
	fabrictest.CheckGoroutines(t)
	srv, calls := countingServer(t, Config{})
	other, err := newTransport(t, Config{Secret: []byte("another secret")}).Dialer("intruder")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var out wrapperspb.StringValue
	err = other.Call(context.Background(), srv.ID(), "count", wrapperspb.String("x"), &out)
	if !errors.Is(err, fabric.ErrAuth) {
		t.Fatalf("call with the wrong secret: got %v, want ErrAuth", err)
	}

	// A dialer that ignores the listener's bad MAC and sends a forged proof
	// followed by a well-formed call is cut off before the call is read.
	nc, err := net.Dial("tcp", string(srv.ID()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// hello: magic, version, id length, id, nonce.
	hello := append([]byte("SLCF\x01\x06forger"), make([]byte, 32)...)
	if _, err := nc.Write(hello); err != nil {
		t.Fatal(err)
	}
	// answer: magic, version, id length, id, nonce, limits, MAC.
	br := bufio.NewReader(nc)
	pre := make([]byte, 6)
	if _, err := io.ReadFull(br, pre); err != nil {
		t.Fatal(err)
	}
	if _, err := br.Discard(int(pre[5]) + 32 + 8 + 32); err != nil {
		t.Fatal(err)
	}
	proof := make([]byte, 8+32) // limits, then a MAC made without the secret
	binary.LittleEndian.PutUint32(proof[0:], 1<<20)
	binary.LittleEndian.PutUint32(proof[4:], 4)
	msg := append(proof, callFrame(1, "count", wrapperspb.String("x"))...)
	nc.Write(msg)
	expectClosed(t, nc)
	if calls.Load() != 0 {
		t.Fatal("a handler ran for an unauthenticated peer")
	}
	// Garbage instead of a hello is refused too.
	nc2, _ := net.Dial("tcp", string(srv.ID()))
	defer nc2.Close()
	nc2.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	expectClosed(t, nc2)
}

func TestOversizedFrameRefusedWithoutAllocation(t *testing.T) {
	srv, calls := countingServer(t, Config{MaxMessage: 64 << 10})
	nc, lim, err := rawConn(t, srv, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	if lim.maxMeta != 64<<10 {
		t.Fatalf("listener announced maxMeta %d, want %d", lim.maxMeta, 64<<10)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	hdr := make([]byte, headerSize)
	h := header{typ: typeCall, id: 1, metaLen: 1 << 30}
	h.encode(hdr, nil)
	nc.Write(hdr)
	expectClosed(t, nc)
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Fatalf("server allocated %d bytes for a frame it should have refused", grew)
	}
	if calls.Load() != 0 {
		t.Fatal("handler ran")
	}
	// The refusal is decided by the header alone: refusing costs the error
	// value and nothing in proportion to the size claimed.
	lim = limits{maxMeta: 64 << 10, maxInFlight: 1}
	runtime.ReadMemStats(&before)
	for i := 0; i < 1000; i++ {
		if _, err := decodeHeader(hdr, lim); !errors.Is(err, fabric.ErrFrameTooLarge) {
			t.Fatalf("decodeHeader: %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / 1000; per > 1024 {
		t.Fatalf("refusing a 1 GiB frame header cost %d bytes each", per)
	}
	good := make([]byte, headerSize)
	(&header{typ: typeCall, id: 2, metaLen: 100}).encode(good, nil)
	if allocs := testing.AllocsPerRun(100, func() { decodeHeader(good, lim) }); allocs != 0 {
		t.Fatalf("decoding a valid header allocated %v times", allocs)
	}
}

func TestOversizedCallRefusedBySender(t *testing.T) {
	srv, calls := countingServer(t, Config{MaxMessage: 1 << 10})
	cli, err := newTransport(t, Config{}).Dialer("cli")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var out wrapperspb.StringValue
	err = cli.Call(context.Background(), srv.ID(), "count", wrapperspb.String(string(make([]byte, 2<<10))), &out)
	if !errors.Is(err, fabric.ErrFrameTooLarge) {
		t.Fatalf("got %v, want ErrFrameTooLarge", err)
	}
	if err := cli.Call(context.Background(), srv.ID(), "count", wrapperspb.String("small"), &out); err != nil {
		t.Fatalf("small call after refusal: %v", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", calls.Load())
	}
}

func TestCorruptFrameDetected(t *testing.T) {
	srv, calls := countingServer(t, Config{})
	nc, _, err := rawConn(t, srv, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	frame := callFrame(1, "count", wrapperspb.String("hello"))
	frame[len(frame)-2] ^= 0x10 // flip a bit in the body
	nc.Write(frame)
	expectClosed(t, nc)
	if calls.Load() != 0 {
		t.Fatal("handler ran on a corrupted frame")
	}
}

// TestCorruptDataDetected: a listener whose read reply fails its data CRC
// makes Read fail with ErrChecksum instead of returning the bytes as data.
func TestCorruptDataDetected(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		if _, _, err := handshake.Accept(nc, testSecret, fabric.NodeID(ln.Addr().String()), handshake.Limits{MaxMessage: 1 << 20, MaxInFlight: 4}); err != nil {
			return
		}
		fr := frameReader{br: bufio.NewReader(nc), lim: limits{maxMeta: 1 << 20}}
		for {
			h, err := fr.header()
			if err != nil {
				return
			}
			meta := make([]byte, h.metaLen)
			if fr.meta(h, meta) != nil {
				return
			}
			d := getDesc(meta)
			frame := encodeFrame(header{typ: typeReadReply, id: h.id}, nil, bytes.Repeat([]byte{7}, int(d.n)))
			frame[len(frame)-1] ^= 1 // corrupt the CRC trailer
			nc.Write(frame)
		}
	}()
	cli, err := newTransport(t, Config{}).Dialer("cli")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	rb := fabric.RemoteBuf{Node: fabric.NodeID(ln.Addr().String()), Key: 1, Len: 4096}
	err = cli.Read(context.Background(), rb, make([]byte, 4096))
	if !errors.Is(err, fabric.ErrChecksum) {
		t.Fatalf("read with a corrupted payload: got %v, want ErrChecksum", err)
	}
}

func TestInFlightLimitEnforced(t *testing.T) {
	srv, _ := countingServer(t, Config{MaxInFlight: 4})
	nc, lim, err := rawConn(t, srv, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	if lim.maxInFlight != 4 {
		t.Fatalf("listener announced %d in flight, want 4", lim.maxInFlight)
	}
	var frames []byte
	for i := 1; i <= 5; i++ {
		frames = append(frames, callFrame(uint64(i), "block", wrapperspb.String(""))...)
	}
	nc.Write(frames)
	expectClosed(t, nc)

	// A well-behaved client keeps to the limit on its own: 20 concurrent
	// blocked calls queue on its side instead of tripping the server.
	cli, err := newTransport(t, Config{ConnsPerPeer: 1}).Dialer("cli")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		go func() {
			var out wrapperspb.StringValue
			errs <- cli.Call(ctx, srv.ID(), "block", wrapperspb.String(""), &out)
		}()
	}
	for i := 0; i < 20; i++ {
		if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("queued call: got %v, want DeadlineExceeded", err)
		}
	}
	var out wrapperspb.StringValue
	if err := cli.Call(context.Background(), srv.ID(), "count", wrapperspb.String(""), &out); err != nil {
		t.Fatalf("connection unusable after queued calls: %v", err)
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	lim := limits{maxMeta: 1 << 20, maxInFlight: 1}
	meta := make([]byte, 3*descSize)
	for i := 0; i < 3; i++ {
		putDesc(meta[i*descSize:], desc{key: uint64(i) << 40, off: uint64(i * 7), n: uint32(i * 100)})
	}
	h := header{typ: typeWrite, id: 42, metaLen: uint32(len(meta)), dataLen: 300, flags: flagDataCRC}
	b := make([]byte, headerSize)
	h.encode(b, meta)
	got, err := decodeHeader(b, lim)
	if err != nil {
		t.Fatal(err)
	}
	if got != h {
		t.Fatalf("decoded %+v, encoded %+v", got, h)
	}
	for i := 0; i < 3; i++ {
		if d := getDesc(meta[i*descSize:]); d.key != uint64(i)<<40 || d.off != uint64(i*7) || d.n != uint32(i*100) {
			t.Fatalf("descriptor %d: %+v", i, d)
		}
	}
	bad := []struct {
		name string
		edit func(b []byte)
		want error
	}{
		{"version", func(b []byte) { b[0] = 9 }, fabric.ErrProtocol},
		{"type", func(b []byte) { b[1] = 77 }, fabric.ErrProtocol},
		{"reserved", func(b []byte) { b[25] = 1 }, fabric.ErrProtocol},
		{"unknown flag", func(b []byte) { b[20] = 4 }, fabric.ErrProtocol},
		{"posted read", func(b []byte) { b[1], b[20] = typeRead, flagPosted }, fabric.ErrProtocol},
		{"meta too large", func(b []byte) { binary.LittleEndian.PutUint32(b[4:], 2<<20) }, fabric.ErrFrameTooLarge},
		{"data too large", func(b []byte) { binary.LittleEndian.PutUint32(b[16:], maxData+1) }, fabric.ErrFrameTooLarge},
		{"partial descriptor", func(b []byte) { binary.LittleEndian.PutUint32(b[4:], descSize+1) }, fabric.ErrProtocol},
		{"status on request", func(b []byte) { b[2] = 1 }, fabric.ErrProtocol},
		{"data on call", func(b []byte) { b[1] = typeCall }, fabric.ErrProtocol},
	}
	for _, c := range bad {
		bb := bytes.Clone(b)
		c.edit(bb)
		if _, err := decodeHeader(bb, lim); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}

func TestConfigRequiresSecret(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("a transport without a secret was created")
	}
}

// TestDeadlineMidFrameKeepsConnection: a caller whose deadline passes
// while its large frame is being written does not cut the frame off, so
// the connection it shares with other callers survives: a blocked call in
// flight on it still gets its own answer, and later calls go through.
func TestDeadlineMidFrameKeepsConnection(t *testing.T) {
	srv, _ := countingServer(t, Config{})
	dst := make([]byte, 64<<20)
	src := fabrictest.RandBytes(9, len(dst))
	mr, err := srv.RegisterMemory(dst, fabric.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := newTransport(t, Config{ConnsPerPeer: 1}).Dialer("cli")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var out wrapperspb.StringValue
	if err := cli.Call(context.Background(), srv.ID(), "count", wrapperspb.String(""), &out); err != nil {
		t.Fatal(err)
	}
	// A call in flight on the one connection, with a deadline of its own.
	blocked := make(chan error, 1)
	bctx, bcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer bcancel()
	go func() {
		blocked <- cli.Call(bctx, srv.ID(), "block", wrapperspb.String(""), new(wrapperspb.StringValue))
	}()
	time.Sleep(50 * time.Millisecond)
	// 64 MiB cannot cross a socket in a millisecond.
	wctx, wcancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer wcancel()
	if err := cli.Write(wctx, src, mr.Remote(0, len(dst))); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write past its deadline: %v", err)
	}
	if err := <-blocked; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the call in flight beside it: got %v, want its own DeadlineExceeded", err)
	}
	if err := cli.Call(context.Background(), srv.ID(), "count", wrapperspb.String(""), &out); err != nil {
		t.Fatalf("connection unusable after a deadline passed mid-frame: %v", err)
	}
}
