#include "textflag.h"

// func fold(crc uint32, b []byte, out *[16]byte, k *[6]uint64)
//
// Z0-Z3 hold four 64-byte accumulators (16 lanes of 128 bits). Each turn
// multiplies every lane's halves by the 256-byte constants and XORs in the
// next 256 bytes. Then Z0 is folded into Z1, Z1 into Z2, Z2 into Z3 (64
// bytes apart), and Z3's four lanes into one (16 bytes apart).
TEXT ·fold(SB), NOSPLIT, $0-48
	MOVL crc+0(FP), AX
	MOVQ b_base+8(FP), SI
	MOVQ b_len+16(FP), CX
	MOVQ out+32(FP), DI
	MOVQ k+40(FP), R8

	VBROADCASTI32X4 (R8), Z8   // 256-byte distance
	VBROADCASTI32X4 16(R8), Z9 // 64-byte distance
	VMOVDQU 32(R8), X10        // 16-byte distance

	VMOVDQU64 (SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVD     AX, X4
	VPXORQ    Z4, Z0, Z0
	ADDQ      $256, SI
	SUBQ      $256, CX

loop:
	CMPQ CX, $256
	JB   reduce
	VPCLMULQDQ $0x00, Z8, Z0, Z4
	VPCLMULQDQ $0x11, Z8, Z0, Z0
	VPCLMULQDQ $0x00, Z8, Z1, Z5
	VPCLMULQDQ $0x11, Z8, Z1, Z1
	VPCLMULQDQ $0x00, Z8, Z2, Z6
	VPCLMULQDQ $0x11, Z8, Z2, Z2
	VPCLMULQDQ $0x00, Z8, Z3, Z7
	VPCLMULQDQ $0x11, Z8, Z3, Z3
	VPTERNLOGQ $0x96, (SI), Z4, Z0
	VPTERNLOGQ $0x96, 64(SI), Z5, Z1
	VPTERNLOGQ $0x96, 128(SI), Z6, Z2
	VPTERNLOGQ $0x96, 192(SI), Z7, Z3
	ADDQ       $256, SI
	SUBQ       $256, CX
	JMP        loop

reduce:
	VPCLMULQDQ $0x00, Z9, Z0, Z4
	VPCLMULQDQ $0x11, Z9, Z0, Z0
	VPTERNLOGQ $0x96, Z4, Z0, Z1
	VPCLMULQDQ $0x00, Z9, Z1, Z4
	VPCLMULQDQ $0x11, Z9, Z1, Z1
	VPTERNLOGQ $0x96, Z4, Z1, Z2
	VPCLMULQDQ $0x00, Z9, Z2, Z4
	VPCLMULQDQ $0x11, Z9, Z2, Z2
	VPTERNLOGQ $0x96, Z4, Z2, Z3

	VEXTRACTI32X4 $1, Z3, X1
	VEXTRACTI32X4 $2, Z3, X2
	VEXTRACTI32X4 $3, Z3, X5
	VPCLMULQDQ    $0x00, X10, X3, X4
	VPCLMULQDQ    $0x11, X10, X3, X3
	VPTERNLOGQ    $0x96, X4, X3, X1
	VPCLMULQDQ    $0x00, X10, X1, X4
	VPCLMULQDQ    $0x11, X10, X1, X1
	VPTERNLOGQ    $0x96, X4, X1, X2
	VPCLMULQDQ    $0x00, X10, X2, X4
	VPCLMULQDQ    $0x11, X10, X2, X2
	VPTERNLOGQ    $0x96, X4, X2, X5

	VMOVDQU X5, (DI)
	VZEROUPPER
	RET
