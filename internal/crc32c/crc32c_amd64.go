package crc32c

import "golang.org/x/sys/cpu"

var useFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasPCLMULQDQ

// fold folds b (a non-zero multiple of 256 bytes long), with crc (a raw
// register, already inverted) XORed into its first four bytes, into 16
// bytes with the same CRC, written to out.
//
//go:noescape
func fold(crc uint32, b []byte, out *[16]byte, k *[6]uint64)
