package sandbox

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// Bounds of a sandbox secret as delivered: the pool mints 43 characters
// (256 bits, base64url); anything shorter than 128 bits of hex is refused.
const (
	minSecretLen = 32
	maxSecretLen = 4 << 10
)

// requireSecret answers 401 to every request that does not carry the
// server's secret in sandboxspec.SecretHeader. Without a secret the server is
// open (unit tests, a server run by hand); every backend that runs this
// server configures one. The comparison is of SHA-256 digests in constant
// time, so neither the secret's bytes nor its length leak through timing.
func (s *Server) requireSecret(next http.Handler) http.Handler {
	if s.secret == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := sha256.Sum256([]byte(r.Header.Get(sandboxspec.SecretHeader)))
		if subtle.ConstantTimeCompare(got[:], s.secret) != 1 {
			s.writeError(w, r, statusErr(http.StatusUnauthorized, "missing or wrong %s: this sandbox answers its gateway only", sandboxspec.SecretHeader))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// secretDigest is what the server keeps of its secret ("" = none).
func secretDigest(secret string) []byte {
	if secret == "" {
		return nil
	}
	d := sha256.Sum256([]byte(secret))
	return d[:]
}

// readSecretFD reads the secret the launcher wrote to an inherited pipe and
// closed (--secret-fd): nothing else can read it afterwards, and it never
// appears in the environment or on the command line.
func readSecretFD(fd int) (string, error) {
	f := os.NewFile(uintptr(fd), "secret")
	if f == nil {
		return "", fmt.Errorf("secret-fd %d: invalid descriptor", fd)
	}
	defer f.Close()
	secret, err := readSecret(f)
	if err != nil {
		return "", fmt.Errorf("secret-fd %d: %w", fd, err)
	}
	return secret, nil
}

// readSecretFile reads the secret a container backend copied into the
// container (--secret-file) and removes the file before anything is served,
// so no command ever finds it. A file that cannot be removed is an error:
// the server refuses to start rather than leave its secret readable.
func readSecretFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("secret-file: %w", err)
	}
	secret, err := readSecret(f)
	_ = f.Close()
	if rmErr := os.Remove(path); rmErr != nil {
		return "", fmt.Errorf("secret-file: remove after reading (the server will not run with its secret left readable): %w", rmErr)
	}
	if err != nil {
		return "", fmt.Errorf("secret-file %s: %w", path, err)
	}
	return secret, nil
}

func readSecret(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxSecretLen+1))
	if err != nil {
		return "", fmt.Errorf("read secret: %w", err)
	}
	secret := strings.TrimSpace(string(b))
	switch {
	case len(secret) < minSecretLen:
		return "", errors.New("secret too short (at least 32 characters)")
	case len(secret) > maxSecretLen:
		return "", errors.New("secret too long")
	}
	return secret, nil
}
