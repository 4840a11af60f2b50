package mix

import "testing"

// TestVectors pins the mixer: chunk placement and sample order in other
// languages depend on these exact values.
func TestVectors(t *testing.T) {
	for in, want := range map[uint64]uint64{0: 0, 1: 0x5692161d100b05e5} {
		if got := Mix64(in); got != want {
			t.Errorf("Mix64(%d) = %#x, want SplitMix64's %#x", in, got, want)
		}
	}
}
