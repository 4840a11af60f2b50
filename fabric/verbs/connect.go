//go:build verbs

package verbs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/internal/handshake"
)

// conn returns the connection to node, building one if needed.
func (ep *Endpoint) conn(ctx context.Context, node fabric.NodeID) (*rc, error) {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return nil, fabric.ErrClosed
	}
	c := ep.peers[node]
	ep.mu.Unlock()
	if c != nil {
		return c, nil
	}
	ep.dialMu.Lock()
	defer ep.dialMu.Unlock()
	ep.mu.Lock()
	c = ep.peers[node]
	ep.mu.Unlock()
	if c != nil {
		return c, nil
	}
	ctx, cancel := context.WithTimeout(ctx, ep.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", string(node))
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %v", fabric.ErrUnreachable, node, err)
	}
	dl, _ := ctx.Deadline()
	nc.SetDeadline(dl)
	_, _, err = handshake.Dial(nc, ep.cfg.Secret, ep.id, ep.limits())
	if err == nil {
		c, err = ep.connect(nc, node)
	}
	if err != nil {
		nc.Close()
		if errors.Is(err, fabric.ErrAuth) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s: %v", fabric.ErrUnreachable, node, err)
	}
	return c, nil
}

func (ep *Endpoint) limits() handshake.Limits {
	return handshake.Limits{MaxMessage: uint32(ep.cfg.MsgSize), MaxInFlight: uint32(ep.cfg.CreditsPerPeer)}
}

func (ep *Endpoint) acceptLoop() {
	defer ep.wg.Done()
	for {
		nc, err := ep.ln.Accept()
		if err != nil {
			return
		}
		ep.spawn(func() {
			nc.SetDeadline(time.Now().Add(ep.cfg.DialTimeout))
			id, _, err := handshake.Accept(nc, ep.cfg.Secret, ep.id, ep.limits())
			if err == nil {
				_, err = ep.connect(nc, id)
			}
			if err != nil {
				ep.log.Warn("fabric/verbs connection refused", "remote", nc.RemoteAddr().String(), "err", err)
				nc.Close()
			}
		})
	}
}

// connect exchanges queue-pair parameters over the authenticated bootstrap
// connection, connects the queue pair and files the connection under peer.
func (ep *Endpoint) connect(nc net.Conn, peer fabric.NodeID) (*rc, error) {
	ep.mu.Lock()
	full := len(ep.peers) >= ep.cfg.RecvBuffers/ep.cfg.CreditsPerPeer
	ep.mu.Unlock()
	if full {
		return nil, fmt.Errorf("fabric/verbs: receive buffers for %d peers all granted", len(ep.peers))
	}
	qp, err := ep.dev.createQP(ep.sendDepth)
	if err != nil {
		return nil, err
	}
	ep.mu.Lock()
	ep.qps = append(ep.qps, qp)
	ep.mu.Unlock()
	var psn [4]byte
	rand.Read(psn[:])
	local := qpInfo{
		QPN: qp.num(), PSN: binary.LittleEndian.Uint32(psn[:]) & 0xffffff, LID: ep.dev.lid, GID: ep.dev.gid,
		MTU: ep.dev.mtu, Port: uint8(ep.dev.port), SendCredits: uint16(ep.cfg.CreditsPerPeer),
		MsgSize: uint32(ep.cfg.MsgSize), OneSided: uint16(ep.rdDepth),
	}
	remote, err := exchange(nc, local)
	if err == nil && remote.SendCredits < 2 {
		err = fmt.Errorf("%w: peer grants %d receive buffers, need 2", fabric.ErrProtocol, remote.SendCredits)
	}
	if err == nil {
		err = qp.connect(ep.dev, local, remote)
	}
	if err != nil {
		qp.toError()
		return nil, err
	}
	c := &rc{
		ep: ep, peer: peer, qp: qp, boot: nc,
		credit: newCredits(int(remote.SendCredits) - 1), reserve: newCredits(1),
		calls:    newCredits(max(1, int(remote.SendCredits)/2)),
		oneSided: newCredits(int(min(remote.OneSided, local.OneSided))),
		ret:      newCreditReturn(ep.cfg.CreditsPerPeer), msgSize: min(int(remote.MsgSize), ep.cfg.MsgSize),
		pending: make(map[uint64]chan result), done: make(chan struct{}),
	}
	// File the connection before telling the peer we are ready: its first
	// message may arrive the moment it knows.
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		qp.toError()
		return nil, fabric.ErrClosed
	}
	old := ep.peers[peer]
	ep.peers[peer] = c
	ep.byQPN[qp.num()] = c
	ep.mu.Unlock()
	if old != nil {
		old.fail(errors.New("replaced by a new connection"))
	}
	if _, err = nc.Write([]byte{1}); err == nil {
		var b [1]byte
		_, err = io.ReadFull(nc, b[:])
	}
	if err != nil {
		c.fail(fmt.Errorf("bootstrap: %w", err))
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	// The bootstrap connection stays open: its end is the peer's death.
	ep.spawn(func() {
		io.Copy(io.Discard, nc)
		c.fail(fmt.Errorf("%w: %s: bootstrap connection closed", fabric.ErrPeerClosed, peer))
	})
	return c, nil
}
