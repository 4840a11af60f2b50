package tcp

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/internal/handshake"
)

// Frame layout (little endian), after the handshake:
//
//	0   version  u8   (frameVersion)
//	1   type     u8   (typeCall ... typeWriteReply)
//	2   status   u16  (replies: a fabric.Code; requests: 0)
//	4   metaLen  u32  (bytes of meta that follow the header)
//	8   reqID    u64  (chosen by the requester, echoed by the reply)
//	16  dataLen  u32  (bytes of bulk data that follow the meta)
//	20  flags    u8   (flagDataCRC, flagPosted)
//	21  reserved      (7 bytes, zero)
//	28  headCRC  u32  (CRC32C of bytes 0..27 and the meta)
//
// followed by the meta, then dataLen bytes of data and, when flagDataCRC is
// set, a trailer: the data's CRC32C (u32). Senders set it unless configured
// to (Config.DataChecksum); receivers check it whenever it is set.
//
// The meta is small and is checked (headCRC) before anything acts on it, so a
// corrupted descriptor can never steer bulk data into the wrong place. Bulk
// data is read straight from the socket into its destination (a registered
// region or the caller's buffer) while its CRC is computed, and checked
// against the trailer; a mismatch fails that one request. The CRC sits
// after the data so that a sender checksums each piece just before writing
// it: the checksum work on both ends overlaps the transfer instead of
// preceding it.
//
// Meta by type:
//
//	typeCall        timeout u64 (ns, 0 = none) | method length u8 | method | protobuf body
//	typeRead        n x descriptor (key u64 | offset u64 | length u32)
//	typeWrite       n x descriptor; the data is the ranges' bytes back to back
//	typeCallReply   protobuf body
//	typeReadReply   empty; the data is the ranges' bytes back to back
//	typeWriteReply  empty
//
// A reply with a non-zero status carries the error message as its meta and no data.
//
// A typeWrite with flagPosted is a push that a handler makes into the memory
// of the peer whose call it is serving, on the connection the call came in
// on: its reqID is that call's (the receiver's own) request id, and it gets
// no reply. The call's reply follows it on the same connection, so the
// reply is its acknowledgement, as a SEND after an RDMA WRITE on one queue
// pair is: the receiver reads the push before the reply, and fails the call
// if the push could not be stored. That saves a round trip per push (a
// chunk read's bytes travel this way).
const (
	headerSize   = 32
	frameVersion = 1
	descSize     = 20

	typeCall       = 1
	typeCallReply  = 2
	typeRead       = 3
	typeReadReply  = 4
	typeWrite      = 5
	typeWriteReply = 6

	// flagDataCRC: the data is followed by its CRC32C.
	flagDataCRC = 1
	// flagPosted: a typeWrite that rides ahead of a call's reply (above).
	flagPosted = 2

	// maxData bounds one frame's bulk data; larger batches are refused locally.
	maxData = 1 << 30
	// maxErrorMsg bounds an error message in a reply.
	maxErrorMsg = 4 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type header struct {
	typ     uint8
	status  fabric.Code
	metaLen uint32
	id      uint64
	dataLen uint32
	flags   uint8
	headCRC uint32
}

// limits is what one side accepts from the other. Each side announces its
// limits in the handshake and the other side never exceeds them.
type limits struct {
	maxMeta     uint32
	maxInFlight uint32
}

func (l limits) wire() handshake.Limits {
	return handshake.Limits{MaxMessage: l.maxMeta, MaxInFlight: l.maxInFlight}
}

func fromWire(l handshake.Limits) limits {
	return limits{maxMeta: l.MaxMessage, maxInFlight: l.MaxInFlight}
}

func isReply(typ uint8) bool {
	return typ == typeCallReply || typ == typeReadReply || typ == typeWriteReply
}

// encode writes h into b (headerSize bytes) with headCRC computed over b and meta.
func (h *header) encode(b []byte, meta []byte) {
	b[0] = frameVersion
	b[1] = h.typ
	binary.LittleEndian.PutUint16(b[2:], uint16(h.status))
	binary.LittleEndian.PutUint32(b[4:], h.metaLen)
	binary.LittleEndian.PutUint64(b[8:], h.id)
	binary.LittleEndian.PutUint32(b[16:], h.dataLen)
	binary.LittleEndian.PutUint64(b[20:], uint64(h.flags))
	crc := crc32.Update(0, castagnoli, b[:28])
	crc = crc32.Update(crc, castagnoli, meta)
	h.headCRC = crc
	binary.LittleEndian.PutUint32(b[28:], crc)
}

// decodeHeader parses and bounds-checks a header. It allocates nothing and
// refuses lengths over lim before anyone allocates for them.
func decodeHeader(b []byte, lim limits) (header, error) {
	var h header
	if b[0] != frameVersion {
		return h, fmt.Errorf("%w: frame version %d", fabric.ErrProtocol, b[0])
	}
	h.typ = b[1]
	if h.typ < typeCall || h.typ > typeWriteReply {
		return h, fmt.Errorf("%w: frame type %d", fabric.ErrProtocol, h.typ)
	}
	h.status = fabric.Code(binary.LittleEndian.Uint16(b[2:]))
	h.metaLen = binary.LittleEndian.Uint32(b[4:])
	h.id = binary.LittleEndian.Uint64(b[8:])
	h.dataLen = binary.LittleEndian.Uint32(b[16:])
	h.headCRC = binary.LittleEndian.Uint32(b[28:])
	h.flags = b[20]
	if binary.LittleEndian.Uint64(b[20:])>>8 != 0 || h.flags&^(flagDataCRC|flagPosted) != 0 {
		return h, fmt.Errorf("%w: reserved header bits set", fabric.ErrProtocol)
	}
	if h.flags&flagPosted != 0 && h.typ != typeWrite {
		return h, fmt.Errorf("%w: posted flag on frame type %d", fabric.ErrProtocol, h.typ)
	}
	if h.flags&flagDataCRC != 0 && h.dataLen == 0 {
		return h, fmt.Errorf("%w: checksum flag on a frame without data", fabric.ErrProtocol)
	}
	if h.metaLen > lim.maxMeta {
		return h, fmt.Errorf("%w: meta of %d bytes, limit %d", fabric.ErrFrameTooLarge, h.metaLen, lim.maxMeta)
	}
	if h.dataLen > maxData {
		return h, fmt.Errorf("%w: data of %d bytes, limit %d", fabric.ErrFrameTooLarge, h.dataLen, maxData)
	}
	if h.status != fabric.CodeOK && (!isReply(h.typ) || h.dataLen != 0 || h.metaLen > maxErrorMsg) {
		return h, fmt.Errorf("%w: malformed error reply", fabric.ErrProtocol)
	}
	switch h.typ {
	case typeCall, typeCallReply, typeRead, typeWriteReply:
		if h.dataLen != 0 {
			return h, fmt.Errorf("%w: type %d carries no data", fabric.ErrProtocol, h.typ)
		}
	}
	switch h.typ {
	case typeRead, typeWrite:
		if h.metaLen == 0 || h.metaLen%descSize != 0 {
			return h, fmt.Errorf("%w: descriptor list of %d bytes", fabric.ErrProtocol, h.metaLen)
		}
	}
	return h, nil
}

// frameReader reads frames from a buffered connection.
type frameReader struct {
	br  *bufio.Reader
	lim limits
	hdr [headerSize]byte
}

func (r *frameReader) header() (header, error) {
	if _, err := io.ReadFull(r.br, r.hdr[:]); err != nil {
		return header{}, err
	}
	return decodeHeader(r.hdr[:], r.lim)
}

// meta reads h's meta into dst (len h.metaLen) and checks the head CRC.
func (r *frameReader) meta(h header, dst []byte) error {
	if _, err := io.ReadFull(r.br, dst); err != nil {
		return err
	}
	crc := crc32.Update(0, castagnoli, r.hdr[:28])
	crc = crc32.Update(crc, castagnoli, dst)
	if crc != h.headCRC {
		return fmt.Errorf("%w: frame header", fabric.ErrChecksum)
	}
	return nil
}

// crcChunk is how much data is checksummed at a time, on both ends: small
// enough to stay in cache between the copy and the checksum, large enough to
// keep system calls few.
const crcChunk = 512 << 10

// data reads h.dataLen bytes scattered over dsts (whose lengths sum to
// h.dataLen) straight from the socket, then the trailer if there is one, and
// returns whether the CRC matched.
func (r *frameReader) data(h header, dsts [][]byte) (bool, error) {
	check := h.flags&flagDataCRC != 0
	crc := uint32(0)
	for _, d := range dsts {
		for len(d) > 0 {
			n := min(len(d), crcChunk)
			if _, err := io.ReadFull(r.br, d[:n]); err != nil {
				return false, err
			}
			if check {
				crc = crc32.Update(crc, castagnoli, d[:n])
			}
			d = d[n:]
		}
	}
	if !check {
		return true, nil
	}
	var trailer [4]byte
	if _, err := io.ReadFull(r.br, trailer[:]); err != nil {
		return false, err
	}
	return crc == binary.LittleEndian.Uint32(trailer[:]), nil
}

// skipData discards h's data and trailer without allocating for them.
func (r *frameReader) skipData(h header) error {
	n := int(h.dataLen)
	if h.flags&flagDataCRC != 0 {
		n += 4
	}
	_, err := r.br.Discard(n)
	return err
}

type desc struct {
	key uint64
	off uint64
	n   uint32
}

func putDesc(b []byte, d desc) {
	binary.LittleEndian.PutUint64(b[0:], d.key)
	binary.LittleEndian.PutUint64(b[8:], d.off)
	binary.LittleEndian.PutUint32(b[16:], d.n)
}

func getDesc(b []byte) desc {
	return desc{
		key: binary.LittleEndian.Uint64(b[0:]),
		off: binary.LittleEndian.Uint64(b[8:]),
		n:   binary.LittleEndian.Uint32(b[16:]),
	}
}
