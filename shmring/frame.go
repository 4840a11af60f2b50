package shmring

import (
	"encoding/binary"
	"fmt"
	"io"
)

// maxFrame bounds a control message, so a client cannot make the agent
// allocate without limit.
const maxFrame = 64 << 10

// A control frame: length u32 (of what follows) | status u8 | payload.
// Requests carry status 0; answers 0 for success and 1 for an error whose
// text is the payload.
func writeFrame(w io.Writer, status byte, payload []byte) error {
	if len(payload) > maxFrame {
		return fmt.Errorf("control message of %d bytes, limit %d", len(payload), maxFrame)
	}
	b := make([]byte, 5+len(payload))
	binary.LittleEndian.PutUint32(b, uint32(1+len(payload)))
	b[4] = status
	copy(b[5:], payload)
	_, err := w.Write(b)
	return err
}

func readFrame(r io.Reader) (byte, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n == 0 || n > maxFrame+1 {
		return 0, nil, fmt.Errorf("control frame of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, nil, err
	}
	return b[0], b[1:], nil
}
