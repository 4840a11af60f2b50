#include "textflag.h"

// MUL256 multiplies the halves of every lane of Z0-Z3 by the 256-byte
// constants (Z8): low products to Z4-Z7, high ones in place.
#define MUL256 \
	VPCLMULQDQ $0x00, Z8, Z0, Z4 \
	VPCLMULQDQ $0x11, Z8, Z0, Z0 \
	VPCLMULQDQ $0x00, Z8, Z1, Z5 \
	VPCLMULQDQ $0x11, Z8, Z1, Z1 \
	VPCLMULQDQ $0x00, Z8, Z2, Z6 \
	VPCLMULQDQ $0x11, Z8, Z2, Z2 \
	VPCLMULQDQ $0x00, Z8, Z3, Z7 \
	VPCLMULQDQ $0x11, Z8, Z3, Z3

// func fold(crc uint32, dst, src []byte, out *[16]byte, k *[6]uint64)
//
// Z0-Z3 hold four 64-byte accumulators (16 lanes of 128 bits). Each turn
// multiplies every lane's halves by the 256-byte constants and XORs in the
// next 256 bytes. Then Z0 is folded into Z1, Z1 into Z2, Z2 into Z3 (64
// bytes apart), and Z3's four lanes into one (16 bytes apart). With a dst,
// every 64 bytes loaded is also stored there (the copying loop), so a copy
// and its checksum read the bytes once.
TEXT ·fold(SB), NOSPLIT, $0-72
	MOVL crc+0(FP), AX
	MOVQ dst_base+8(FP), DX
	MOVQ src_base+32(FP), SI
	MOVQ src_len+40(FP), CX
	MOVQ out+56(FP), DI
	MOVQ k+64(FP), R8

	VBROADCASTI32X4 (R8), Z8   // 256-byte distance
	VBROADCASTI32X4 16(R8), Z9 // 64-byte distance
	VMOVDQU 32(R8), X10        // 16-byte distance

	VMOVDQU64 (SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVD     AX, X4
	ADDQ      $256, SI
	SUBQ      $256, CX
	TESTQ     DX, DX
	JNZ       copyfirst
	VPXORQ    Z4, Z0, Z0

loop:
	CMPQ CX, $256
	JB   reduce
	MUL256
	VPTERNLOGQ $0x96, (SI), Z4, Z0
	VPTERNLOGQ $0x96, 64(SI), Z5, Z1
	VPTERNLOGQ $0x96, 128(SI), Z6, Z2
	VPTERNLOGQ $0x96, 192(SI), Z7, Z3
	ADDQ       $256, SI
	SUBQ       $256, CX
	JMP        loop

copyfirst:
	VMOVDQU64 Z0, (DX)
	VMOVDQU64 Z1, 64(DX)
	VMOVDQU64 Z2, 128(DX)
	VMOVDQU64 Z3, 192(DX)
	VPXORQ    Z4, Z0, Z0
	ADDQ      $256, DX

copyloop:
	CMPQ CX, $256
	JB   reduce
	VMOVDQU64  (SI), Z12
	VMOVDQU64  64(SI), Z13
	VMOVDQU64  128(SI), Z14
	VMOVDQU64  192(SI), Z15
	VMOVDQU64  Z12, (DX)
	VMOVDQU64  Z13, 64(DX)
	VMOVDQU64  Z14, 128(DX)
	VMOVDQU64  Z15, 192(DX)
	MUL256
	VPTERNLOGQ $0x96, Z12, Z4, Z0
	VPTERNLOGQ $0x96, Z13, Z5, Z1
	VPTERNLOGQ $0x96, Z14, Z6, Z2
	VPTERNLOGQ $0x96, Z15, Z7, Z3
	ADDQ       $256, SI
	ADDQ       $256, DX
	SUBQ       $256, CX
	JMP        copyloop

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

