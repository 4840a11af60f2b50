package crc32c

import "golang.org/x/sys/cpu"

var useFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasPCLMULQDQ

// fold folds src (a non-zero multiple of 256 bytes long), with crc (a raw
// register, already inverted) XORed into its first four bytes, into 16
// bytes with the same CRC, written to out. With a non-nil dst (at least as
// long as src, not overlapping it) it also copies src there, reading each
// byte once.
//
//go:noescape
func fold(crc uint32, dst, src []byte, out *[16]byte, k *[6]uint64)
