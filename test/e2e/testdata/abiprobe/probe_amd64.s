//go:build linux

#include "textflag.h"

// func forkIA32(nr, a1, a2, a3 uintptr) (pid int, errno uintptr)
//
// The approach of internal/jail's forkIA32Syscall: fork(2)s; the child
// makes syscall nr (an i386 number) with a1..a3 through int $0x80 and
// exits with the errno it got (0 when the call went through). In a child
// because unshare(CLONE_NEWUSER) needs a single-threaded caller; SIGSEGV
// goes back to its default first, so a kernel without ia32 emulation kills
// the child instead of running the Go runtime's handler in it.
TEXT ·forkIA32(SB), NOSPLIT, $32-48
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
	MOVQ	$-1, pid+32(FP)
	MOVQ	AX, errno+40(FP)
	RET
ok:
	MOVQ	AX, pid+32(FP)
	MOVQ	$0, errno+40(FP)
	RET
