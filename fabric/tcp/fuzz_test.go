package tcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// FuzzDecodeFrame feeds arbitrary bytes to the frame decoder: it must never
// panic, never accept a length over its limits, and whatever it accepts must
// re-encode to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(callFrame(1, "echo", wrapperspb.String("hello")))
	meta := make([]byte, descSize)
	putDesc(meta, desc{key: 5, off: 1, n: 4})
	f.Add(encodeFrame(header{typ: typeWrite, id: 3}, meta, []byte{1, 2, 3, 4}))
	f.Add(make([]byte, headerSize))
	lim := limits{maxMeta: 64 << 10, maxInFlight: 8}
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := frameReader{br: bufio.NewReader(bytes.NewReader(in)), lim: lim}
		for {
			h, err := fr.header()
			if err != nil {
				return
			}
			if h.metaLen > lim.maxMeta || h.dataLen > maxData {
				t.Fatalf("accepted %+v over limits", h)
			}
			raw := bytes.Clone(fr.hdr[:])
			meta := make([]byte, h.metaLen)
			if err := fr.meta(h, meta); err != nil {
				return
			}
			again := make([]byte, headerSize)
			h2 := h
			h2.encode(again, meta)
			if !bytes.Equal(again, raw) {
				t.Fatalf("header re-encodes differently:\n%x\n%x", raw, again)
			}
			if h.dataLen > 1<<20 {
				return
			}
			if _, err := fr.data(h, [][]byte{make([]byte, h.dataLen)}); err != nil {
				return
			}
		}
	})
}

// FuzzServe drives a real endpoint's connection with well-framed (CRC-valid)
// frames of fuzzed type, status, id, meta and data, reaching every request
// parser behind the checksum. The endpoint must neither panic nor hang, and
// must still serve a proper client afterwards.
func FuzzServe(f *testing.F) {
	f.Add([]byte{typeCall, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 'e', 'c', 'h', 'o'}, []byte{})
	f.Add([]byte{typeRead}, make([]byte, descSize))
	f.Add([]byte{typeWrite, 0}, append(make([]byte, descSize), 1, 2))
	f.Add([]byte{typeCallReply, 9}, []byte("x"))
	f.Add([]byte{typeWrite, descSize, 1}, append(make([]byte, descSize), 1, 2))
	f.Fuzz(func(t *testing.T, head []byte, body []byte) {
		watchdog := time.AfterFunc(5*time.Second, func() {
			buf := make([]byte, 1<<20)
			panic(fmt.Sprintf("FuzzServe hung on %x / %x\n%s", head, body, buf[:runtime.Stack(buf, true)]))
		})
		defer watchdog.Stop()
		tr := newTransport(t, Config{MaxMessage: 4 << 10, MaxInFlight: 4})
		ep := tr.newEndpoint("fuzz-server")
		defer ep.Close()
		fabric.Handle(ep, "echo", func(ctx context.Context, peer fabric.NodeID, req *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
			return req, nil
		})
		region := make([]byte, 64)
		mr, _ := ep.RegisterMemory(region, fabric.AccessRemoteReadWrite)
		key := mr.Key()

		a, b := net.Pipe()
		defer a.Close()
		if err := ep.start(newConn(ep, b, "fuzzer", false, limits{maxMeta: 4 << 10, maxInFlight: 4})); err != nil {
			t.Fatal(err)
		}
		go io.Copy(io.Discard, a)

		// head: type, then split points for meta and data; body: the bytes.
		typ := uint8(typeCall)
		if len(head) > 0 {
			typ = head[0]
		}
		split := len(body)
		if len(head) > 1 {
			split = int(head[1]) % (len(body) + 1)
		}
		meta, data := bytes.Clone(body[:split]), body[split:]
		// Let the fuzzer hit the live key: descriptors whose key is 1 name it.
		for i := 0; i+descSize <= len(meta) && (typ == typeRead || typ == typeWrite); i += descSize {
			if binary.LittleEndian.Uint64(meta[i:]) == 1 {
				binary.LittleEndian.PutUint64(meta[i:], key)
			}
		}
		h := header{typ: typ, id: 7}
		if len(head) > 2 && head[2]&1 != 0 {
			h.flags = flagPosted // a push posted ahead of a reply we are not waiting for
		}
		frame := encodeFrame(h, meta, data)
		a.SetWriteDeadline(time.Now().Add(2 * time.Second))
		a.Write(frame)
	})
}

// dataCRC is the CRC32C of bufs back to back.
func dataCRC(bufs [][]byte) uint32 {
	crc := uint32(0)
	for _, b := range bufs {
		crc = crc32.Update(crc, castagnoli, b)
	}
	return crc
}
