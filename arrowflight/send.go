package arrowflight

import (
	"bytes"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// DoGet's messages leave without a copy of their bodies on the way to
// gRPC: arrow-go's Flight writer serializes each body into a buffer and
// the protobuf codec copies that into another, two passes over every
// byte of a batch before gRPC frames it. Here the IPC writer's payload is
// sent as a frame whose body is the batch's own buffers, and the server's
// codec encodes a frame as FlightData's wire format by prefixing them
// with the fields and lengths and handing gRPC the buffers as they are.
// gRPC writes a message after SendMsg returns, so the batch is retained
// until it has dropped its last reference to them (the buffers' pool's
// Put): only then does its memory go back to the loader.

// FlightData's field numbers (Flight.proto).
const (
	fieldDataHeader  = 2
	fieldAppMetadata = 3
	fieldDataBody    = 1000
)

// frame is one FlightData message of DoGet.
type frame struct {
	header, meta []byte
	body         [][]byte // the body's parts in order: buffers and padding
	bodyLen      int
	done         func() // once gRPC is done with body (nil: nothing to wait for)
}

// codec is the server's gRPC codec: frames as above, everything else
// through gRPC's protobuf codec.
type codec struct{ proto encoding.CodecV2 }

func newCodec() codec { return codec{encoding.GetCodecV2(proto.Name)} }

func (c codec) Name() string { return proto.Name }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*frame)
	if !ok {
		return c.proto.Marshal(v)
	}
	var head []byte
	if len(f.header) > 0 {
		head = protowire.AppendTag(head, fieldDataHeader, protowire.BytesType)
		head = protowire.AppendBytes(head, f.header)
	}
	if len(f.meta) > 0 {
		head = protowire.AppendTag(head, fieldAppMetadata, protowire.BytesType)
		head = protowire.AppendBytes(head, f.meta)
	}
	if f.bodyLen > 0 {
		head = protowire.AppendTag(head, fieldDataBody, protowire.BytesType)
		head = protowire.AppendVarint(head, uint64(f.bodyLen))
	}
	out := mem.BufferSlice{mem.SliceBuffer(head)}
	// Parts too small for gRPC to count references to are copied; the
	// others go as they are, and the last of them to be freed ends the
	// frame.
	var shared []*[]byte
	for _, p := range f.body {
		if mem.IsBelowBufferPoolingThreshold(len(p)) {
			out = append(out, mem.SliceBuffer(bytes.Clone(p)))
			continue
		}
		p = p[:len(p):len(p)]
		shared = append(shared, &p)
		out = append(out, nil) // filled below, once the count is known
	}
	if len(shared) == 0 {
		if f.done != nil {
			f.done()
		}
		return out, nil
	}
	pool := &framePool{done: f.done}
	pool.left.Store(int32(len(shared)))
	k := 0
	for i := range out {
		if out[i] == nil {
			out[i] = mem.NewBuffer(shared[k], pool)
			k++
		}
	}
	return out, nil
}

// framePool is a frame's body seen as gRPC's buffer pool: gRPC puts each
// shared part back when it no longer needs it.
type framePool struct {
	left atomic.Int32
	done func()
}

func (p *framePool) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

func (p *framePool) Put(*[]byte) {
	if p.left.Add(-1) == 0 && p.done != nil {
		p.done()
	}
}

// sender is an ipc.PayloadWriter that sends each IPC message as a frame
// on a server stream.
type sender struct {
	ss   grpc.ServerStream
	meta []byte            // the next message's app metadata
	keep arrow.RecordBatch // what the next message's body points into
}

func (s *sender) Start() error { return nil }
func (s *sender) Close() error { return nil }

func (s *sender) WritePayload(p ipc.Payload) error {
	f := &frame{}
	if m := p.Meta(); m != nil {
		f.header = bytes.Clone(m.Bytes()) // the payload's, released when this returns
		msg := ipc.NewMessage(m, memory.NewBufferBytes(nil))
		if msg.Type() == ipc.MessageRecordBatch {
			// The batch's own message (not the schema written before the
			// first one): it carries the metadata and points into keep.
			f.meta = s.meta
			if s.keep != nil {
				s.keep.Retain()
				f.done = s.keep.Release
			}
			s.meta, s.keep = nil, nil
		}
		msg.Release()
		m.Release()
	}
	var parts bodyParts
	if err := p.SerializeBody(&parts); err != nil {
		if f.done != nil {
			f.done()
		}
		return err
	}
	f.body, f.bodyLen = parts.b, parts.n
	return s.ss.SendMsg(f)
}

// bodyParts collects the slices a payload's body is written as, without
// copying them: they stay the payload's buffers (padding is a shared
// constant), which the batch behind them keeps alive.
type bodyParts struct {
	b [][]byte
	n int
}

func (w *bodyParts) Write(p []byte) (int, error) {
	w.b = append(w.b, p)
	w.n += len(p)
	return len(p), nil
}

// recordSender writes record batches to a DoGet stream through sender.
type recordSender struct {
	s *sender
	w *ipc.Writer
}

func newRecordSender(ss grpc.ServerStream, schema *arrow.Schema) *recordSender {
	s := &sender{ss: ss}
	return &recordSender{s: s, w: ipc.NewWriterWithPayloadWriter(s, ipc.WithSchema(schema))}
}

// write sends rec with meta as its app metadata; rec is retained until
// gRPC has written it.
func (r *recordSender) write(rec arrow.RecordBatch, meta []byte) error {
	r.s.meta, r.s.keep = meta, rec
	return r.w.Write(rec)
}

// close ends the stream of messages (the schema alone if nothing was sent).
func (r *recordSender) close() error { return r.w.Close() }
