package backend

import "fmt"

// ImageError is a sandbox that cannot start because its image is missing
// and cannot be pulled (or may not be: docker_pull_policy never). The image
// reference is configuration, neither a host path nor a secret, so clients
// (502) and /readyz are told it: the fix is an operator's.
type ImageError struct {
	Image string
	Err   error
}

func (e *ImageError) Error() string { return fmt.Sprintf("image %s: %v", e.Image, e.Err) }
func (e *ImageError) Unwrap() error { return e.Err }
