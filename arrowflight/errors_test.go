package arrowflight

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/sdk"
)

// TestStatusOf: each kind of failure gets its code and keeps its message.
func TestStatusOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{fmt.Errorf("open: %w", sdk.ErrNotExist), codes.NotFound},
		{fmt.Errorf("create: %w", sdk.ErrExist), codes.AlreadyExists},
		{badRequest(errors.New("rank 5 of 2")), codes.InvalidArgument},
		{fmt.Errorf("read: %w", fabric.NewError(fabric.FirstAppCode+9, "chain has no serving replica")), codes.Unavailable},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{errors.New("something else"), codes.Internal},
	} {
		st, _ := status.FromError(statusOf(tc.err, codes.Internal))
		if st.Code() != tc.code || st.Message() != tc.err.Error() {
			t.Errorf("%v: %v %q, want %v and the error's text", tc.err, st.Code(), st.Message(), tc.code)
		}
	}
}
