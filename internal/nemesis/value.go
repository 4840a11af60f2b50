package nemesis

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// BlockSize is the size of one register: a 4 KiB block at a fixed offset.
const BlockSize = 4096

// A value fills its whole block and describes itself, so that a read of
// anything else — zeros where a value was, half of one value and half of
// another, another key's block, flipped bits — is recognised:
//
//	[0:8)     magic "SLNEMVAL"
//	[8:12)    key
//	[12:16)   writer
//	[16:24)   counter
//	[24:4092) filler drawn from (key, writer, counter)
//	[4092:)   CRC-32C of everything before it
//
// A value's identity is (writer, counter) packed in a uint64 (ValueID);
// 0 is the block never written (all zeros).
var magic = []byte("SLNEMVAL")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ValueID packs a writer and its counter into a value's identity.
func ValueID(writer uint32, counter uint64) uint64 { return uint64(writer)<<40 | counter&(1<<40-1) }

// splitValueID is ValueID's inverse.
func splitValueID(v uint64) (writer uint32, counter uint64) { return uint32(v >> 40), v & (1<<40 - 1) }

// EncodeValue fills b (BlockSize bytes) with value v of key.
func EncodeValue(b []byte, key int, v uint64) {
	writer, counter := splitValueID(v)
	copy(b[0:8], magic)
	binary.LittleEndian.PutUint32(b[8:12], uint32(key))
	binary.LittleEndian.PutUint32(b[12:16], writer)
	binary.LittleEndian.PutUint64(b[16:24], counter)
	fill(b[24:BlockSize-4], uint64(key), v)
	binary.LittleEndian.PutUint32(b[BlockSize-4:], crc32.Checksum(b[:BlockSize-4], castagnoli))
}

// DecodeValue returns the value in b, a block read for key: 0 for a block
// of zeros, or an error saying how the block is not a whole value of key.
func DecodeValue(b []byte, key int) (uint64, error) {
	if len(b) != BlockSize {
		return 0, fmt.Errorf("block of %d bytes", len(b))
	}
	if allZero(b) {
		return 0, nil
	}
	if !bytes.Equal(b[0:8], magic) {
		return 0, fmt.Errorf("no value header (first bytes %x)", b[:16])
	}
	if got, want := crc32.Checksum(b[:BlockSize-4], castagnoli), binary.LittleEndian.Uint32(b[BlockSize-4:]); got != want {
		return 0, fmt.Errorf("checksum %08x, the block says %08x (torn or corrupt)", got, want)
	}
	k := int(binary.LittleEndian.Uint32(b[8:12]))
	v := ValueID(binary.LittleEndian.Uint32(b[12:16]), binary.LittleEndian.Uint64(b[16:24]))
	if k != key {
		return v, fmt.Errorf("key %d's value %s read at key %d", k, FormatValue(v), key)
	}
	want := make([]byte, BlockSize-28)
	fill(want, uint64(key), v)
	if !bytes.Equal(want, b[24:BlockSize-4]) {
		return v, fmt.Errorf("value %s: filler does not match its header", FormatValue(v))
	}
	return v, nil
}

// FormatValue names a value: "w3#17", or "zero".
func FormatValue(v uint64) string {
	if v == 0 {
		return "zero"
	}
	w, c := splitValueID(v)
	return fmt.Sprintf("w%d#%d", w, c)
}

// fill writes a splitmix64 stream seeded by key and value.
func fill(b []byte, key, v uint64) {
	s := key*0x9e3779b97f4a7c15 ^ v
	for i := 0; i < len(b); i += 8 {
		s += 0x9e3779b97f4a7c15
		z := s
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], z)
		copy(b[i:], w[:])
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
