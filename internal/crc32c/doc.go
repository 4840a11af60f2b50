// Package crc32c owns the CRC32C (Castagnoli) that Sluice checks data with
// end to end: chunk blocks on disk, ranges pushed to readers, samples in a
// dataset. Values are those of hash/crc32 with the Castagnoli table.
//
// On amd64 with AVX-512 and VPCLMULQDQ, buffers of 1 KiB or more are
// folded 256 bytes at a time by carry-less multiplication in four 512-bit
// accumulators (the folding method of Intel's "Fast CRC Computation for
// Generic Polynomials Using PCLMULQDQ"), and the last 16 folded bytes and
// the tail go through hash/crc32's CRC32-instruction code. Elsewhere, and
// for short buffers, it is hash/crc32.
//
// Folding constants are computed at start-up from the polynomial, not
// tabled: a fold over d bytes multiplies the two halves of a 128-bit
// accumulator by x^(8d+64) and x^(8d) mod P, each divided by x and
// bit-reflected, because a carry-less product of two reflected 64-bit values
// comes out as the reflected product times x.
package crc32c
