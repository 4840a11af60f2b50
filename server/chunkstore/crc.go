package chunkstore

import "hash/crc32"

// CRC is the CRC32C that chunk data is checked with everywhere.

// crcCombine returns the CRC32C of a||b given crcA = CRC(a), crcB = CRC(b)
// and len(b), in O(log len(b)) without touching the bytes: the engine
// checksums each block once and derives the whole chunk's CRC from the
// blocks'. (The GF(2) matrix method of zlib's crc32_combine, for the
// reflected Castagnoli polynomial.)
func crcCombine(crcA, crcB uint32, lenB int) uint32 {
	if lenB == blockSize {
		return blockShift.apply(crcA) ^ crcB
	}
	return crcCombineSlow(crcA, crcB, lenB)
}

func crcCombineSlow(crcA, crcB uint32, lenB int) uint32 {
	if lenB <= 0 {
		return crcA ^ crcB
	}
	var even, odd [32]uint32
	odd[0] = 0x82f63b78 // reflected Castagnoli polynomial
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd) // two zero bits
	gf2Square(&odd, &even) // four zero bits
	n := uint64(lenB)
	for {
		gf2Square(&even, &odd)
		if n&1 != 0 {
			crcA = gf2Times(&even, crcA)
		}
		if n >>= 1; n == 0 {
			break
		}
		gf2Square(&odd, &even)
		if n&1 != 0 {
			crcA = gf2Times(&odd, crcA)
		}
		if n >>= 1; n == 0 {
			break
		}
	}
	return crcA ^ crcB
}

// blockShift is the operator crcCombine applies for a full block, built
// once. The operator is linear over GF(2), so it is kept as four tables of
// 256 entries, one per byte of the CRC: applying it costs four lookups
// instead of the 32 steps of a matrix-vector product, which showed up at
// 5% of a 1 MiB write's CPU (256 combines per chunk).
var blockShift = func() (t shiftTables) {
	var m [32]uint32 // column i: the unit vector 1<<i shifted by blockSize zeros
	for i := range m {
		m[i] = crcCombineSlow(1<<i, 0, blockSize)
	}
	for k := range t {
		for b := range t[k] {
			t[k][b] = gf2Times(&m, uint32(b)<<(8*k))
		}
	}
	return t
}()

// shiftTables is a linear operator on CRCs, by byte.
type shiftTables [4][256]uint32

func (t *shiftTables) apply(crc uint32) uint32 {
	return t[0][byte(crc)] ^ t[1][byte(crc>>8)] ^ t[2][byte(crc>>16)] ^ t[3][byte(crc>>24)]
}

func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat *[32]uint32) {
	for n := 0; n < 32; n++ {
		square[n] = gf2Times(mat, mat[n])
	}
}

// castagnoli is the reflected Castagnoli polynomial. In this (reflected)
// representation bit 31 of a CRC register is the coefficient of x^0.
const castagnoli = 0x82f63b78

// timesX is the register after one more zero bit: r·x mod P.
func timesX(r uint32) uint32 { return r>>1 ^ -(r&1)&castagnoli }

// overX undoes timesX: r·x⁻¹ mod P. The low bit that timesX shifted out
// shows in bit 31, which only the polynomial sets (x⁻¹ exists mod P
// because P's constant term is 1).
func overX(r uint32) uint32 {
	if r&(1<<31) != 0 {
		return (r^castagnoli)<<1 | 1
	}
	return r << 1
}

// gfMul is a·b mod P, both in the reflected representation: their
// carry-less product, then reduced. The product's bit k is the coefficient
// of x^(62-k): its bits 31 to 62 are the terms below x^32 as they stand,
// and bits 0 to 30 those from x^32 up, which four zero bytes through the
// CRC table (each a multiplication by x^8) bring below x^32. A 4 KiB
// sample read through an agent derives its CRC with four or five of these
// (14 ns each, against 114 bit by bit: BenchmarkShiftCRC).
func gfMul(a, b uint32) uint32 {
	v := clmul32(a, b)
	h := uint32(v << 1)
	for range 4 {
		h = crcTable[byte(h)] ^ h>>8
	}
	return h ^ uint32(v>>31)
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// clmul32 is the carry-less product of a and b, from integer products of
// their bits taken four apart: each bit of such a product sums at most
// eight terms, which fit below the next bit kept, so no carry reaches it.
func clmul32(a, b uint32) uint64 {
	const m0, m1, m2, m3 = 0x11111111, 0x22222222, 0x44444444, 0x88888888
	a0, a1, a2, a3 := uint64(a&m0), uint64(a&m1), uint64(a&m2), uint64(a&m3)
	b0, b1, b2, b3 := uint64(b&m0), uint64(b&m1), uint64(b&m2), uint64(b&m3)
	z0 := a0*b0 ^ a1*b3 ^ a2*b2 ^ a3*b1
	z1 := a0*b1 ^ a1*b0 ^ a2*b3 ^ a3*b2
	z2 := a0*b2 ^ a1*b1 ^ a2*b0 ^ a3*b3
	z3 := a0*b3 ^ a1*b2 ^ a2*b1 ^ a3*b0
	return z0&(m0|m0<<32) | z1&(m1|m1<<32) | z2&(m2|m2<<32) | z3&(m3|m3<<32)
}

// bytePowers[n] is x^(8n) mod P and byteInverses[n] x^(-8n) mod P, for
// n up to a block: multiplying a CRC by them appends or takes off n zero
// bytes, which is what shifting one CRC past another's bytes is.
var bytePowers, byteInverses = func() (pow, inv [blockSize + 1]uint32) {
	pow[0], inv[0] = 1<<31, 1<<31 // x^0
	for n := 1; n <= blockSize; n++ {
		p, q := pow[n-1], inv[n-1]
		for range 8 {
			p, q = timesX(p), overX(q)
		}
		pow[n], inv[n] = p, q
	}
	return pow, inv
}()

// shiftCRC is crcCombine(crc, 0, n) for n up to a block: the CRC of a||b
// is shiftCRC(CRC(a), len(b)) ^ CRC(b).
func shiftCRC(crc uint32, n uint32) uint32 {
	if n == blockSize {
		return blockShift.apply(crc)
	}
	return gfMul(bytePowers[n], crc)
}

// unshiftCRC inverts shiftCRC: given CRC(a||b) ^ CRC(b), the CRC of a.
func unshiftCRC(crc uint32, n uint32) uint32 { return gfMul(byteInverses[n], crc) }
