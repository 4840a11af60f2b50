// Package handshake authenticates a fabric connection: a mutual HMAC-SHA256
// challenge-response over the cluster secret, which also exchanges each
// side's identity and limits. Every fabric transport that bootstraps over a
// stream (tcp, and verbs for its queue-pair exchange) uses it, so there is
// one handshake to review and fuzz.
package handshake

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/sluicefs/sluice/fabric"
)

// Handshake (mutual HMAC-SHA256 challenge-response over the cluster secret):
//
//	dialer -> listener  hello:  magic "SLCF" | version u8 | idLen u8 | id | nonceD [32]
//	listener -> dialer  answer: magic "SLCF" | version u8 | idLen u8 | id | nonceL [32] |
//	                            maxMeta u32 | maxInFlight u32 | macL [32]
//	dialer -> listener  proof:  maxMeta u32 | maxInFlight u32 | macD [32]
//
//	macL = HMAC(secret, "sluice-listener" | transcript)
//	macD = HMAC(secret, "sluice-dialer"   | transcript)
//	transcript = nonceD | nonceL | idD | idL | both sides' limits, each id length-prefixed
//
// Each side proves it knows the secret over fresh nonces from both sides, so
// neither a replay nor a reflected MAC passes. The listener reads nothing but
// these fixed, bounded messages until the dialer's proof checks out.
const (
	handshakeMagic   = "SLCF"
	handshakeVersion = 1
	nonceSize        = 32
	macSize          = sha256.Size
	maxIDLen         = 255
)

// Limits is what one side accepts from the other; each side announces its
// own and keeps to the peer's.
type Limits struct {
	MaxMessage  uint32 // largest message body
	MaxInFlight uint32 // requests in flight at once
}

type hello struct {
	id    fabric.NodeID
	nonce [nonceSize]byte
}

func writeHello(w io.Writer, h hello) error {
	if len(h.id) > maxIDLen {
		return fmt.Errorf("handshake: node id of %d bytes, limit %d", len(h.id), maxIDLen)
	}
	b := make([]byte, 0, 6+len(h.id)+nonceSize)
	b = append(b, handshakeMagic...)
	b = append(b, handshakeVersion, byte(len(h.id)))
	b = append(b, h.id...)
	b = append(b, h.nonce[:]...)
	_, err := w.Write(b)
	return err
}

func readHello(r io.Reader) (hello, error) {
	var h hello
	var pre [6]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return h, fmt.Errorf("handshake: read hello: %w", err)
	}
	if string(pre[:4]) != handshakeMagic || pre[4] != handshakeVersion {
		return h, fmt.Errorf("%w: not a sluice fabric peer (magic %q, version %d)", fabric.ErrProtocol, pre[:4], pre[4])
	}
	id := make([]byte, pre[5])
	if _, err := io.ReadFull(r, id); err != nil {
		return h, fmt.Errorf("handshake: read id: %w", err)
	}
	if _, err := io.ReadFull(r, h.nonce[:]); err != nil {
		return h, fmt.Errorf("handshake: read nonce: %w", err)
	}
	h.id = fabric.NodeID(id)
	return h, nil
}

func newNonce() ([nonceSize]byte, error) {
	var n [nonceSize]byte
	_, err := rand.Read(n[:])
	return n, err
}

type transcript struct {
	dialer, listener       hello
	dialerLim, listenerLim Limits
}

func (t *transcript) mac(secret []byte, role string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(role))
	m.Write(t.dialer.nonce[:])
	m.Write(t.listener.nonce[:])
	for _, id := range []fabric.NodeID{t.dialer.id, t.listener.id} {
		m.Write([]byte{byte(len(id))})
		m.Write([]byte(id))
	}
	var lb [16]byte
	putLimits(lb[0:], t.dialerLim)
	putLimits(lb[8:], t.listenerLim)
	m.Write(lb[:])
	return m.Sum(nil)
}

func putLimits(b []byte, l Limits) {
	binary.LittleEndian.PutUint32(b[0:], l.MaxMessage)
	binary.LittleEndian.PutUint32(b[4:], l.MaxInFlight)
}

func getLimits(b []byte) (Limits, error) {
	l := Limits{MaxMessage: binary.LittleEndian.Uint32(b[0:]), MaxInFlight: binary.LittleEndian.Uint32(b[4:])}
	if l.MaxInFlight == 0 || l.MaxMessage < 64 {
		return l, fmt.Errorf("%w: peer limits %+v", fabric.ErrProtocol, l)
	}
	return l, nil
}

// Dial runs the dialer's side. It returns the listener's identity
// and limits once the listener has proved it knows the secret.
func Dial(rw io.ReadWriter, secret []byte, self fabric.NodeID, lim Limits) (fabric.NodeID, Limits, error) {
	t := transcript{dialerLim: lim}
	var err error
	t.dialer.id = self
	if t.dialer.nonce, err = newNonce(); err != nil {
		return "", Limits{}, err
	}
	if err := writeHello(rw, t.dialer); err != nil {
		return "", Limits{}, fmt.Errorf("handshake: send hello: %w", err)
	}
	if t.listener, err = readHello(rw); err != nil {
		return "", Limits{}, err
	}
	var rest [8 + macSize]byte
	if _, err := io.ReadFull(rw, rest[:]); err != nil {
		return "", Limits{}, fmt.Errorf("handshake: read answer: %w", err)
	}
	if t.listenerLim, err = getLimits(rest[:8]); err != nil {
		return "", Limits{}, err
	}
	answerT := t
	answerT.dialerLim = Limits{} // the listener answers before it knows them
	if !hmac.Equal(rest[8:], answerT.mac(secret, "sluice-listener")) {
		return "", Limits{}, fmt.Errorf("%w: listener %s does not know the cluster secret", fabric.ErrAuth, t.listener.id)
	}
	var proof [8 + macSize]byte
	putLimits(proof[:8], lim)
	copy(proof[8:], t.mac(secret, "sluice-dialer"))
	if _, err := rw.Write(proof[:]); err != nil {
		return "", Limits{}, fmt.Errorf("handshake: send proof: %w", err)
	}
	return t.listener.id, t.listenerLim, nil
}

// Accept runs the listener's side. It returns the dialer's identity
// and limits only once the dialer has proved it knows the secret.
func Accept(rw io.ReadWriter, secret []byte, self fabric.NodeID, lim Limits) (fabric.NodeID, Limits, error) {
	t := transcript{listenerLim: lim}
	var err error
	if t.dialer, err = readHello(rw); err != nil {
		return "", Limits{}, err
	}
	t.listener.id = self
	if t.listener.nonce, err = newNonce(); err != nil {
		return "", Limits{}, err
	}
	// The dialer's limits are part of the transcript but only arrive with its
	// proof, so the listener's MAC covers the listener's side alone.
	answerT := transcript{dialer: t.dialer, listener: t.listener, listenerLim: lim}
	var buf []byte
	w := &sliceWriter{&buf}
	if err := writeHello(w, t.listener); err != nil {
		return "", Limits{}, err
	}
	var tail [8]byte
	putLimits(tail[:], lim)
	buf = append(buf, tail[:]...)
	buf = append(buf, answerT.mac(secret, "sluice-listener")...)
	if _, err := rw.Write(buf); err != nil {
		return "", Limits{}, fmt.Errorf("handshake: send answer: %w", err)
	}
	var proof [8 + macSize]byte
	if _, err := io.ReadFull(rw, proof[:]); err != nil {
		return "", Limits{}, fmt.Errorf("handshake: read proof: %w", err)
	}
	if t.dialerLim, err = getLimits(proof[:8]); err != nil {
		return "", Limits{}, err
	}
	if !hmac.Equal(proof[8:], t.mac(secret, "sluice-dialer")) {
		return "", Limits{}, fmt.Errorf("%w: dialer %q does not know the cluster secret", fabric.ErrAuth, t.dialer.id)
	}
	return t.dialer.id, t.dialerLim, nil
}

type sliceWriter struct{ b *[]byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	*w.b = append(*w.b, p...)
	return len(p), nil
}
