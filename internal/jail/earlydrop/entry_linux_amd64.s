//go:build linux && amd64

#include "go_asm.h"
#include "textflag.h"

// func entry()
//
// The program's entry point where the build names it (-E, see entry_linux_amd64.go):
// the kernel jumps here with one thread and the stack exec laid out (argc
// at 0(SP), argv from 8(SP)). For a sandbox init (argv[1] is entryCommand,
// argc 2, pid 1) it makes drop's calls on that one thread, which every
// thread the Go runtime then starts inherits, and sets atEntry when each
// succeeded; on the first that fails it stops, and the package's init then
// drops at start-up as without this entry. Either way it goes on to the Go
// runtime's own entry with the stack untouched.
TEXT ·entry(SB), NOSPLIT|NOFRAME, $0
	MOVQ	0(SP), AX
	CMPQ	AX, $2
	JNE	start
	MOVQ	16(SP), SI // argv[1]
	MOVQ	·entryCommand(SB), DI
	MOVQ	·entryCommand+8(SB), CX // its length, the NUL included
compare:
	MOVB	(SI), AX
	CMPB	AX, (DI)
	JNE	start
	INCQ	SI
	INCQ	DI
	DECQ	CX
	JNZ	compare
	MOVQ	$39, AX // getpid
	SYSCALL
	CMPQ	AX, $1
	JNE	start

	// prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	MOVQ	$const_prCapAmbient, DI
	MOVQ	$const_prCapAmbientClearAll, SI
	CALL	prctl<>(SB)
	JNE	start
	// Each capability of the bounding set: PR_CAPBSET_READ fails with
	// EINVAL past the kernel's last one.
	XORQ	R12, R12
bounding:
	MOVQ	$const_prCapbsetRead, DI
	MOVQ	R12, SI
	CALL	prctl<>(SB)
	JEQ	next // not in the set
	CMPQ	AX, $-22 // -EINVAL
	JEQ	securebits
	CMPQ	AX, $1
	JNE	start
	MOVQ	$const_prCapbsetDrop, DI
	MOVQ	R12, SI
	CALL	prctl<>(SB)
	JNE	start
next:
	INCQ	R12
	JMP	bounding
securebits:
	MOVQ	$const_prSetSecurebits, DI
	MOVQ	$const_lockedSecurebits, SI
	CALL	prctl<>(SB)
	JNE	start
	MOVQ	$const_prSetNoNewPrivs, DI
	MOVQ	$1, SI
	CALL	prctl<>(SB)
	JNE	start
	MOVB	$1, ·atEntry(SB)
start:
	JMP	_rt0_amd64_linux(SB)

// prctl(DI, SI, 0, 0, 0), its result in AX and the flags set by TESTQ AX
// (ZF: 0 returned).
TEXT prctl<>(SB), NOSPLIT|NOFRAME, $0
	MOVQ	$157, AX // prctl
	XORQ	DX, DX
	XORQ	R10, R10
	XORQ	R8, R8
	SYSCALL
	TESTQ	AX, AX
	RET
