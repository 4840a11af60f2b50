package fabrictest

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// Benchmarks report ratios against a baseline measured in the same process
// and run, because the machines are shared and noisy. These helpers are the
// one way Sluice's benchmarks do that.

// SocketExchange returns a function doing one request-response exchange
// over a plain loopback TCP socket: the client sends reqSize bytes, the
// server answers respSize bytes, each side reading into a buffer of its
// own. It is the baseline for anything that crosses a socket.
func SocketExchange(b *testing.B, reqSize, respSize int) func() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(acc)
			return
		}
		acc <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	s := <-acc
	b.Cleanup(func() { c.Close(); s.Close() })
	go func() {
		req, resp := make([]byte, reqSize), make([]byte, respSize)
		for {
			if _, err := io.ReadFull(s, req); err != nil {
				return
			}
			if _, err := s.Write(resp); err != nil {
				return
			}
		}
	}()
	req, resp := make([]byte, reqSize), make([]byte, respSize)
	binary.LittleEndian.PutUint64(req, 1)
	return func() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			b.Fatal(err)
		}
	}
}

// Versus times op against base, b.N times each, alternating blocks of 8 so
// that drift in the machine's speed hits both alike. b's own timer covers op
// only. It returns base's time ÷ op's time: op's speed relative to base's.
func Versus(b *testing.B, op, base func()) float64 {
	const block = 8
	for i := 0; i < 2*block; i++ {
		op()
		base()
	}
	var opTime, baseTime time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		n := min(block, b.N-done)
		t0 := time.Now()
		for i := 0; i < n; i++ {
			op()
		}
		t1 := time.Now()
		b.StopTimer()
		for i := 0; i < n; i++ {
			base()
		}
		baseTime += time.Since(t1)
		b.StartTimer()
		opTime += t1.Sub(t0)
	}
	b.StopTimer()
	return baseTime.Seconds() / opTime.Seconds()
}
