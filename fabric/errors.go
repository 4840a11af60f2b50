package fabric

import (
	"context"
	"errors"
	"fmt"
)

// Code identifies an error condition across the wire. Codes below
// FirstAppCode belong to fabric; applications define theirs with NewError
// from FirstAppCode up.
type Code uint16

// Fabric's own codes.
const (
	CodeOK Code = iota
	CodeUnknownKey
	CodeRevoked
	CodeOutOfBounds
	CodeAccessDenied
	CodeUnknownMethod
	CodeBadRequest
	CodeInternal
	CodeChecksum
	CodeDeadline
	CodeCanceled

	// FirstAppCode is the first code applications may use.
	FirstAppCode Code = 1000
)

// Error is an error with a Code. Two Errors match under errors.Is when their
// codes are equal, so a sentinel declared with NewError matches the error a
// peer sent back with the same code, whatever its message.
type Error struct {
	Code Code
	Msg  string
}

// NewError declares an error condition that survives a trip across the wire.
func NewError(code Code, msg string) *Error { return &Error{Code: code, Msg: msg} }

func (e *Error) Error() string { return e.Msg }

// Is matches any *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Remote-side errors, returned by one-sided operations and calls.
var (
	ErrUnknownKey    = NewError(CodeUnknownKey, "fabric: unknown remote key")
	ErrRevoked       = NewError(CodeRevoked, "fabric: remote key revoked")
	ErrOutOfBounds   = NewError(CodeOutOfBounds, "fabric: range out of region bounds")
	ErrAccessDenied  = NewError(CodeAccessDenied, "fabric: access denied by region rights")
	ErrUnknownMethod = NewError(CodeUnknownMethod, "fabric: unknown method")
	ErrBadRequest    = NewError(CodeBadRequest, "fabric: bad request")
	ErrInternal      = NewError(CodeInternal, "fabric: handler failed")
	ErrChecksum      = NewError(CodeChecksum, "fabric: checksum mismatch")
)

// Local errors: conditions of the connection rather than of a request.
var (
	// ErrClosed: the local endpoint was closed.
	ErrClosed = errors.New("fabric: endpoint closed")
	// ErrPeerClosed: the connection to the peer was lost or the peer closed.
	ErrPeerClosed = errors.New("fabric: connection to peer lost")
	// ErrUnreachable: no connection to the peer could be made.
	ErrUnreachable = errors.New("fabric: peer unreachable")
	// ErrAuth: the handshake failed; the peer does not share the cluster secret.
	ErrAuth = errors.New("fabric: authentication failed")
	// ErrFrameTooLarge: a frame exceeded the agreed limits.
	ErrFrameTooLarge = errors.New("fabric: frame exceeds limit")
	// ErrProtocol: the peer sent something the protocol does not allow.
	ErrProtocol = errors.New("fabric: protocol violation")
	// ErrLengthMismatch: a local buffer and its remote range differ in length.
	ErrLengthMismatch = errors.New("fabric: length mismatch")
)

// CodeOf returns the code to send for err: the code of the *Error it wraps,
// CodeDeadline or CodeCanceled for context errors, or CodeInternal.
func CodeOf(err error) Code {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, context.DeadlineExceeded):
		return CodeDeadline
	case errors.Is(err, context.Canceled):
		return CodeCanceled
	}
	return CodeInternal
}

// RemoteError rebuilds an error a peer sent as (code, message). The result
// matches the sentinel with that code under errors.Is, and the context
// errors for CodeDeadline and CodeCanceled.
func RemoteError(code Code, msg string) error {
	switch code {
	case CodeDeadline:
		return fmt.Errorf("remote: %s: %w", msg, context.DeadlineExceeded)
	case CodeCanceled:
		return fmt.Errorf("remote: %s: %w", msg, context.Canceled)
	}
	return fmt.Errorf("remote: %w", &Error{Code: code, Msg: msg})
}
