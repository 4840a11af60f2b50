package arrowflight

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
	pb "google.golang.org/protobuf/proto"
)

// TestFrameWireFormat: a frame encodes as the FlightData protobuf with the
// same fields, and its done runs once gRPC frees the last shared part,
// not before.
func TestFrameWireFormat(t *testing.T) {
	big := bytes.Repeat([]byte{7}, 5000)
	small := []byte{1, 2, 3}
	body := [][]byte{big, small, big[:2000]}
	done := 0
	f := &frame{header: []byte("header"), meta: []byte(`{"consumed":3}`), body: body, bodyLen: 7003, done: func() { done++ }}
	out, err := newCodec().Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pb.Marshal(&flight.FlightData{DataHeader: f.header, AppMetadata: f.meta, DataBody: bytes.Join(body, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Materialize(); !bytes.Equal(got, want) {
		t.Fatalf("frame encodes as %d bytes, not as FlightData's %d", len(got), len(want))
	}
	var back flight.FlightData
	if err := newCodec().Unmarshal(out, &back); err != nil || !bytes.Equal(back.DataBody, bytes.Join(body, nil)) {
		t.Fatalf("decoded back: %v", err)
	}
	if done != 0 {
		t.Fatalf("done ran %d times before the parts were freed", done)
	}
	out.Free()
	if done != 1 {
		t.Fatalf("done ran %d times after the parts were freed, want once", done)
	}
}
