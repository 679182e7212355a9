package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// redisDockerfile makes an image of this machine's redis-server and
// redis-cli with the libraries they link, at their host paths; no
// registry is needed. It runs as the official image does: redis-server
// with the Pod's args, in /data, without protected mode (which the
// official image compiles out: its network is the cluster's, and Debian's
// build would refuse every client not on loopback).
const redisDockerfile = `FROM scratch
COPY rootfs/ /
ENV PATH=/usr/bin
WORKDIR /data
ENTRYPOINT ["/usr/bin/redis-server", "--protected-mode", "no"]
`

// BuildRedisImage builds a Redis image from this machine's binaries (see
// redisDockerfile), unless one of the same content exists, and returns its
// tag.
func BuildRedisImage(ctx context.Context) (string, error) {
	files := []imageFile{{"Dockerfile", []byte(redisDockerfile)}}
	seen := map[string]bool{}
	for _, name := range []string{"redis-server", "redis-cli"} {
		bin, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("redis image: %w", err)
		}
		libs, err := SharedLibs(bin)
		if err != nil {
			return "", err
		}
		// The binary under its own name: Debian's redis-server is a symlink
		// to redis-check-rdb, which chooses its mode by the name it runs as.
		paths := append([]string{bin}, libs...)
		for i, path := range paths {
			dst := path
			if i == 0 {
				dst = "/usr/bin/" + name
			}
			if seen[dst] {
				continue
			}
			seen[dst] = true
			data, err := os.ReadFile(path)
			if err != nil {
				return "", fmt.Errorf("redis image: %w", err)
			}
			files = append(files, imageFile{"rootfs" + dst, data})
		}
	}
	return buildTestImage(ctx, "sandgate-test-redis", files)
}

// SharedLibs lists the shared libraries bin links (ldd), the dynamic
// loader included, with their symlinks resolved.
func SharedLibs(bin string) ([]string, error) {
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return nil, err
	}
	out, err := exec.Command("ldd", real).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", real, err)
	}
	var libs []string
	for line := range strings.Lines(string(out)) {
		var lib string
		if _, after, ok := strings.Cut(line, "=>"); ok {
			if f := strings.Fields(after); len(f) > 0 {
				lib = f[0]
			}
		} else if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "/") {
			lib = f[0] // the dynamic loader
		}
		if !strings.HasPrefix(lib, "/") {
			continue // linux-vdso
		}
		libs = append(libs, lib)
	}
	return libs, nil
}
