package arrowflight

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/sdk"
)

// Conditions a call fails with, before they become status codes.
var (
	errBadRequest = errors.New("bad request") // INVALID_ARGUMENT
	errBusy       = errors.New("busy")        // RESOURCE_EXHAUSTED
)

// statusOf turns err into a gRPC status error (what Flight clients see as
// FlightError subclasses): the message keeps err's text, the code says
// what kind of failure it is; otherwise is the code when nothing more
// specific applies.
func statusOf(err error, otherwise codes.Code) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := otherwise
	switch {
	case errors.Is(err, errBadRequest):
		code = codes.InvalidArgument
	case errors.Is(err, errBusy):
		code = codes.ResourceExhausted
	case errors.Is(err, sdk.ErrNotExist):
		code = codes.NotFound
	case errors.Is(err, sdk.ErrExist):
		code = codes.AlreadyExists
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.As(err, new(*fabric.Error)):
		code = codes.Unavailable // the cluster's, not the request's
	}
	return status.Error(code, err.Error())
}

// badRequest marks err as the request's fault.
func badRequest(err error) error {
	return &marked{err, errBadRequest}
}

type marked struct{ err, kind error }

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{m.err, m.kind} }
