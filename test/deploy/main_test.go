// Package deploy checks what ships for deployment against real tools: the
// gateway image (built with the real Docker engine from a host-built binary,
// deployments/gateway-image/build.sh) run next to a real Redis with the
// docker backend; compose.yaml through docker-compose; the nginx config in a
// real nginx; the kustomize base and overlays rendered by kubectl and
// applied with --dry-run=server to a real kube-apiserver. `make
// validate-deploy` runs this package. Locally a missing tool skips with a
// message; under CI=true it fails.
package deploy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"

	"github.com/sandgate/sandgate/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.StopKubeAPIServer()
	removeGatewayImage()
	os.Exit(code)
}

// repoPath is a path in the repository.
func repoPath(parts ...string) string {
	return filepath.Join(append([]string{testutil.ModuleRoot()}, parts...)...)
}

// removeGatewayImage removes the image gatewayImage built, if it did.
func removeGatewayImage() {
	if gwImage.tag == "" {
		return
	}
	c, err := newDocker()
	if err != nil {
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = c.ImageRemove(ctx, gwImage.tag, image.RemoveOptions{Force: true, PruneChildren: true})
}
