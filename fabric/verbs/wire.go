package verbs

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/sluicefs/sluice/fabric"
)

// qpInfo is what each side sends the other over the bootstrap connection,
// once authenticated, to connect a pair of RC queue pairs.
type qpInfo struct {
	QPN  uint32   // queue pair number (24 bits)
	PSN  uint32   // initial packet sequence number (24 bits)
	LID  uint16   // port LID (InfiniBand); 0 on RoCE
	GID  [16]byte // port GID (RoCE, or InfiniBand across subnets)
	MTU  uint8    // path MTU as enum ibv_mtu (1 = 256 ... 5 = 4096)
	Port uint8    // the sender's port number, for its logs

	// SendCredits is how many SENDs the peer may have outstanding to us:
	// receive buffers reserved for it on our shared receive queue.
	SendCredits uint16
	// MsgSize is the size of each of those receive buffers: the largest
	// message the peer may send.
	MsgSize uint32
	// OneSided is how many RDMA READs and WRITEs the peer may have in flight
	// against our memory at once (bounded by max_dest_rd_atomic for READs).
	OneSided uint16
	// Region is the remote key of the peer-visible region the bootstrap
	// needs; zero when none. Reserved for future use.
	Region uint32
}

const (
	qpInfoMagic   = "SLQP"
	qpInfoVersion = 1
	qpInfoSize    = 4 + 1 + 4 + 4 + 2 + 16 + 1 + 1 + 2 + 4 + 2 + 4
)

func (q qpInfo) marshal() []byte {
	b := make([]byte, 0, qpInfoSize)
	b = append(b, qpInfoMagic...)
	b = append(b, qpInfoVersion)
	b = binary.LittleEndian.AppendUint32(b, q.QPN)
	b = binary.LittleEndian.AppendUint32(b, q.PSN)
	b = binary.LittleEndian.AppendUint16(b, q.LID)
	b = append(b, q.GID[:]...)
	b = append(b, q.MTU, q.Port)
	b = binary.LittleEndian.AppendUint16(b, q.SendCredits)
	b = binary.LittleEndian.AppendUint32(b, q.MsgSize)
	b = binary.LittleEndian.AppendUint16(b, q.OneSided)
	b = binary.LittleEndian.AppendUint32(b, q.Region)
	return b
}

// parseQPInfo decodes and validates a peer's queue-pair parameters.
func parseQPInfo(b []byte) (qpInfo, error) {
	var q qpInfo
	if len(b) != qpInfoSize {
		return q, fmt.Errorf("%w: queue-pair info of %d bytes, want %d", fabric.ErrProtocol, len(b), qpInfoSize)
	}
	if string(b[:4]) != qpInfoMagic || b[4] != qpInfoVersion {
		return q, fmt.Errorf("%w: queue-pair info magic %q version %d", fabric.ErrProtocol, b[:4], b[4])
	}
	p := b[5:]
	q.QPN = binary.LittleEndian.Uint32(p[0:])
	q.PSN = binary.LittleEndian.Uint32(p[4:])
	q.LID = binary.LittleEndian.Uint16(p[8:])
	copy(q.GID[:], p[10:26])
	q.MTU, q.Port = p[26], p[27]
	q.SendCredits = binary.LittleEndian.Uint16(p[28:])
	q.MsgSize = binary.LittleEndian.Uint32(p[30:])
	q.OneSided = binary.LittleEndian.Uint16(p[34:])
	q.Region = binary.LittleEndian.Uint32(p[36:])
	switch {
	case q.QPN == 0 || q.QPN >= 1<<24:
		return q, fmt.Errorf("%w: queue pair number %#x", fabric.ErrProtocol, q.QPN)
	case q.PSN >= 1<<24:
		return q, fmt.Errorf("%w: packet sequence number %#x", fabric.ErrProtocol, q.PSN)
	case q.MTU < 1 || q.MTU > 5:
		return q, fmt.Errorf("%w: path MTU enum %d", fabric.ErrProtocol, q.MTU)
	case q.SendCredits == 0 || q.OneSided == 0:
		return q, fmt.Errorf("%w: peer grants no credits", fabric.ErrProtocol)
	case q.MsgSize < minMsgSize:
		return q, fmt.Errorf("%w: message size %d below %d", fabric.ErrProtocol, q.MsgSize, minMsgSize)
	}
	return q, nil
}

// Messages over SEND/RECV: a fixed header, then the body.
//
//	0   type     u8   (msgCall, msgReply, msgCredit)
//	1   reserved u8
//	2   status   u16  (replies: a fabric.Code)
//	4   credits  u16  (SEND credits handed back to the receiver of this message)
//	6   reserved u16
//	8   reqID    u64
//	16  timeout  u64  (calls: ns, 0 = none)
//	24  method length u8, method, protobuf body (calls); body or error text (replies)
const (
	msgCall   = 1
	msgReply  = 2
	msgCredit = 3 // carries only credits

	msgHeaderSize = 24
	minMsgSize    = 256
)

type msgHeader struct {
	typ     uint8
	status  fabric.Code
	credits uint16
	id      uint64
	timeout uint64
}

func (h msgHeader) put(b []byte) {
	b[0], b[1] = h.typ, 0
	binary.LittleEndian.PutUint16(b[2:], uint16(h.status))
	binary.LittleEndian.PutUint16(b[4:], h.credits)
	binary.LittleEndian.PutUint16(b[6:], 0)
	binary.LittleEndian.PutUint64(b[8:], h.id)
	binary.LittleEndian.PutUint64(b[16:], h.timeout)
}

// parseMsg splits a received message into its header and body.
func parseMsg(b []byte) (msgHeader, []byte, error) {
	var h msgHeader
	if len(b) < msgHeaderSize {
		return h, nil, fmt.Errorf("%w: message of %d bytes", fabric.ErrProtocol, len(b))
	}
	h.typ = b[0]
	h.status = fabric.Code(binary.LittleEndian.Uint16(b[2:]))
	h.credits = binary.LittleEndian.Uint16(b[4:])
	h.id = binary.LittleEndian.Uint64(b[8:])
	h.timeout = binary.LittleEndian.Uint64(b[16:])
	if h.typ < msgCall || h.typ > msgCredit {
		return h, nil, fmt.Errorf("%w: message type %d", fabric.ErrProtocol, h.typ)
	}
	if h.status != fabric.CodeOK && h.typ != msgReply {
		return h, nil, fmt.Errorf("%w: status on a message of type %d", fabric.ErrProtocol, h.typ)
	}
	return h, b[msgHeaderSize:], nil
}

// callBody splits a call's body into method and request.
func callBody(b []byte) (string, []byte, error) {
	if len(b) < 1 || len(b) < 1+int(b[0]) || b[0] == 0 {
		return "", nil, fmt.Errorf("%w: short call", fabric.ErrBadRequest)
	}
	return string(b[1 : 1+int(b[0])]), b[1+int(b[0]):], nil
}

// Keys: a RemoteBuf's Key is the region's rkey (which the NIC checks) in the
// high half and the index of the region in the owner's table in the low half
// (which the owner uses to tell a revoked key from an unknown one).
func makeKey(rkey, index uint32) uint64 { return uint64(rkey)<<32 | uint64(index) }
func rkeyOf(key uint64) uint32          { return uint32(key >> 32) }

// exchange sends local's parameters and reads the peer's, length-prefixed.
func exchange(rw io.ReadWriter, local qpInfo) (qpInfo, error) {
	b := local.marshal()
	if _, err := rw.Write(append([]byte{byte(len(b))}, b...)); err != nil {
		return qpInfo{}, fmt.Errorf("send queue-pair info: %w", err)
	}
	var n [1]byte
	if _, err := io.ReadFull(rw, n[:]); err != nil {
		return qpInfo{}, fmt.Errorf("read queue-pair info: %w", err)
	}
	rb := make([]byte, n[0])
	if _, err := io.ReadFull(rw, rb); err != nil {
		return qpInfo{}, fmt.Errorf("read queue-pair info: %w", err)
	}
	return parseQPInfo(rb)
}
