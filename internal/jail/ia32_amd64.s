//go:build linux

#include "textflag.h"

// func forkIA32Syscall(nr, a1, a2, a3, a4, a5 uintptr) (pid int, errno uintptr)
//
// vfork(2)s (clone with CLONE_VM|CLONE_VFORK and SIGCHLD: no copy of the
// page tables, which fork spent 0.2 ms on at every sandbox start); the
// child makes syscall nr with a1..a5 through int $0x80, the ia32 syscall
// ABI (i386 numbers), and exits with the errno it got (0 when the call
// went through). Before that it sets SIGSEGV to its default
// (in its own copy of the handlers: no CLONE_SIGHAND), so that on a kernel
// without ia32 emulation, where int $0x80 faults, it dies of SIGSEGV
// instead of running the Go runtime's handler on this thread's memory. The
// child touches nothing but this frame and registers, and never returns
// into Go; this thread sleeps until it has exited. The parent gets the
// child's pid, or clone's errno.
TEXT ·forkIA32Syscall(SB), NOSPLIT, $32-64
	MOVQ	$56, AX // clone
	MOVQ	$0x4111, DI // CLONE_VM|CLONE_VFORK|SIGCHLD
	MOVQ	$0, SI // the same stack
	MOVQ	$0, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
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
