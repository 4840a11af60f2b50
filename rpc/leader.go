package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// LeaderConn is a connection to a control plane of one or more replicas
// ("host:port,host:port,..."). Calls go to the replica that answered last;
// one refused as Unavailable (not the leader, or not reachable) moves on to
// the next replica and is sent again, round after round with backoff, until
// one takes it, the call's context ends, or RetryFor has passed. Sending a
// call again is safe: every mutation carries its caller's (client,
// sequence) pair and the metadata group applies it once.
//
// Streams (the cluster-map watch) open on the current replica, which need
// not lead: every replica has the map. A stream that breaks as Unavailable
// moves the connection on, so the caller's reopening finds another.
type LeaderConn struct {
	addrs []string
	conns []*grpc.ClientConn
	cur   atomic.Int32
	// RetryFor bounds how long one call keeps trying when its context has
	// no earlier deadline (default 30 s: several elections).
	RetryFor time.Duration
}

var _ grpc.ClientConnInterface = (*LeaderConn)(nil)

// Dial makes a LeaderConn to the comma-separated addresses. It does not
// wait for any of them.
func Dial(addrs string, opts ...grpc.DialOption) (*LeaderConn, error) {
	l := &LeaderConn{RetryFor: 30 * time.Second}
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	for _, a := range strings.Split(addrs, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if err := checkAddr(a); err != nil {
			l.Close()
			return nil, err
		}
		cc, err := grpc.NewClient(a, opts...)
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("rpc: dial %s: %w", a, err)
		}
		l.addrs, l.conns = append(l.addrs, a), append(l.conns, cc)
	}
	if len(l.conns) == 0 {
		return nil, errors.New("rpc: no control-plane address")
	}
	return l, nil
}

// checkAddr refuses an address that is not host:port with a numeric port,
// which gRPC would take and then fail to resolve on every call, forever.
// A name (a scheme such as dns:///) is left to gRPC.
func checkAddr(a string) error {
	if strings.Contains(a, "///") {
		return nil
	}
	_, port, err := net.SplitHostPort(a)
	if err == nil {
		var n uint64
		if n, err = strconv.ParseUint(port, 10, 16); err == nil && n == 0 {
			err = errors.New("port 0")
		} else if err != nil {
			err = fmt.Errorf("port %q is not a number from 1 to 65535", port)
		}
	}
	if err != nil {
		return fmt.Errorf("rpc: malformed address %q (want host:port): %w", a, err)
	}
	return nil
}

// Addr is the replica calls go to now.
func (l *LeaderConn) Addr() string { return l.addrs[l.cur.Load()] }

// moveOn leaves replica i for the next, unless another call already has.
func (l *LeaderConn) moveOn(i int32) {
	l.cur.CompareAndSwap(i, (i+1)%int32(len(l.conns)))
}

// Invoke sends a unary call to the leader, following it as it moves.
func (l *LeaderConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	give := time.Now().Add(l.RetryFor)
	backoff := 20 * time.Millisecond
	for tries := 1; ; tries++ {
		i := l.cur.Load()
		err := l.conns[i].Invoke(ctx, method, args, reply, opts...)
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil || time.Now().After(give) {
			return err
		}
		l.moveOn(i)
		if tries%len(l.conns) != 0 {
			continue // try the next replica at once
		}
		select { // a whole round refused: an election, most likely
		case <-time.After(backoff):
		case <-ctx.Done():
			return err
		}
		backoff = min(2*backoff, time.Second)
	}
}

// NewStream opens a stream on the current replica.
func (l *LeaderConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	i := l.cur.Load()
	s, err := l.conns[i].NewStream(ctx, desc, method, opts...)
	if err != nil {
		if status.Code(err) == codes.Unavailable {
			l.moveOn(i)
		}
		return nil, err
	}
	return &followedStream{ClientStream: s, l: l, i: i}, nil
}

// followedStream moves its LeaderConn on when it breaks as Unavailable.
type followedStream struct {
	grpc.ClientStream
	l *LeaderConn
	i int32
}

func (s *followedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if status.Code(err) == codes.Unavailable {
		s.l.moveOn(s.i)
	}
	return err
}

// Close closes every replica's connection.
func (l *LeaderConn) Close() error {
	var errs []error
	for _, cc := range l.conns {
		errs = append(errs, cc.Close())
	}
	return errors.Join(errs...)
}
