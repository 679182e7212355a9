//go:build !linux

package seccompfilter

import "errors"

func program() ([]byte, error) { return nil, errors.New("only on Linux") }
