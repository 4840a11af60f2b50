package shmring

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzRingFromPeer: whatever a client writes into its ring segment —
// indices, capacity, entries — the agent's side neither panics nor lets
// through an entry whose range leaves the Iov, and never takes more than
// the capacity at once.
func FuzzRingFromPeer(f *testing.F) {
	good := make([]byte, RingSize(16))
	r, _ := InitRing(good, 16)
	r.Submit([]Entry{{File: 1, Offset: 2, BufOff: 100, Length: 50, Op: OpRead, UserData: 3}})
	f.Add(good, 4096)
	f.Add(good[:offEntries], 0)
	f.Add(bytes.Repeat([]byte{0xff}, RingSize(16)), 1<<20)
	f.Fuzz(func(t *testing.T, mem []byte, iovLen int) {
		if iovLen < 0 {
			iovLen = -iovLen
		}
		if len(mem) >= 8 {
			copy(mem, ringMagic) // past the magic, so the rest gets exercised
		}
		r, err := AttachRing(mem)
		if err != nil {
			return
		}
		es := make([]Entry, r.Capacity()+3)
		n := r.Take(es, 0)
		if n > r.Capacity() {
			t.Fatalf("took %d entries from a ring of %d", n, r.Capacity())
		}
		for _, e := range es[:n] {
			if e.valid(iovLen) && (e.BufOff > uint64(iovLen) || e.BufOff+uint64(e.Length) > uint64(iovLen)) {
				t.Fatalf("entry %+v passes for an Iov of %d bytes", e, iovLen)
			}
		}
		r.Complete(make([]Completion, r.Capacity()+1))
	})
}

// FuzzControlFrame: a control frame from a client decodes or fails
// cleanly, and never yields a payload over the limit.
func FuzzControlFrame(f *testing.F) {
	var b bytes.Buffer
	writeFrame(&b, 0, []byte(`{"op":"open","path":"/x"}`))
	f.Add(b.Bytes())
	f.Add([]byte{0, 0, 0, 0})
	f.Add(binary.LittleEndian.AppendUint32(nil, maxFrame+2))
	f.Fuzz(func(t *testing.T, in []byte) {
		_, payload, err := readFrame(bytes.NewReader(in))
		if err == nil && len(payload) > maxFrame {
			t.Fatalf("a payload of %d bytes, limit %d", len(payload), maxFrame)
		}
	})
}
