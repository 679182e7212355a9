// Package seccompfilter compiles the process backend's sandbox syscall
// filter. The gateway compiles it once and hands the program to every
// sandbox in its spec (jail.Spec.Seccomp), which loads it as it is: the
// compiler's syscall tables (go-seccomp-bpf's arch package) cost every
// sandbox start over a millisecond at package init, and building the
// policy as much again, when the sandbox binary linked it.
package seccompfilter

import "fmt"

// Program is the filter as raw classic BPF for this machine's
// architecture: 8 bytes per instruction (code, jt, jf, k), in the machine's
// byte order, the layout of struct sock_filter. Compiled once.
func Program() ([]byte, error) {
	p, err := program()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	return p, nil
}
