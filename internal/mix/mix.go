// Package mix holds the integer mixer Sluice's keyed bijections share (chunk
// placement in server/meta, the sample permutation in dataset). Other
// languages reimplement it bit for bit, so it never changes.
package mix

// Mix64 is SplitMix64's finalizer: a bijection of uint64 that spreads every
// input bit over the output.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
