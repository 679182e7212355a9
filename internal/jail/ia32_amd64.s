//go:build linux

#include "textflag.h"

// func forkIA32Syscall(nr, a1, a2, a3, a4, a5 uintptr) (pid int, errno uintptr)
//
// fork(2)s; the child makes syscall nr with a1..a5 through int $0x80, the
// ia32 syscall ABI (i386 numbers), and exits with the errno it got (0 when
// the call went through). Before that it sets SIGSEGV to its default, so
// that on a kernel without ia32 emulation, where int $0x80 faults, it dies
// of SIGSEGV instead of running the Go runtime's handler in a copy of a
// multi-threaded process. The child touches nothing but its own stack and
// registers, and never returns into Go. The parent gets the child's pid, or
// fork's errno.
TEXT ·forkIA32Syscall(SB), NOSPLIT, $32-64
	MOVQ	$57, AX // fork
	SYSCALL
	CMPQ	AX, $0
	JNE	parent
	// child: rt_sigaction(SIGSEGV, &{SIG_DFL, 0, 0, 0}, NULL, 8)
	MOVQ	$0, 0(SP)
	MOVQ	$0, 8(SP)
	MOVQ	$0, 16(SP)
	MOVQ	$0, 24(SP)
	MOVQ	$13, AX
	MOVQ	$11, DI
	LEAQ	0(SP), SI
	MOVQ	$0, DX
	MOVQ	$8, R10
	SYSCALL
	MOVQ	nr+0(FP), AX
	MOVQ	a1+8(FP), BX
	MOVQ	a2+16(FP), CX
	MOVQ	a3+24(FP), DX
	MOVQ	a4+32(FP), SI
	MOVQ	a5+40(FP), DI
	INT	$0x80
	MOVL	$0, DI
	CMPL	AX, $0xfffff001
	JCS	exit // below: a result, not an error
	NEGL	AX
	MOVL	AX, DI
exit:
	MOVQ	$231, AX // exit_group
	SYSCALL
	HLT

parent:
	CMPQ	AX, $0xfffffffffffff001
	JCS	ok
	NEGQ	AX
	MOVQ	$-1, pid+48(FP)
	MOVQ	AX, errno+56(FP)
	RET
ok:
	MOVQ	AX, pid+48(FP)
	MOVQ	$0, errno+56(FP)
	RET
