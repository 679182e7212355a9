package docker

import (
	"context"
	"fmt"
	"io"

	"github.com/docker/docker/client"
)

// engineClient connects to the engine at host ("" = DOCKER_HOST or the
// default socket), lazily: nothing is sent until the first call.
func engineClient(host string) (*client.Client, error) {
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	api, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker engine client: %w", err)
	}
	return api, nil
}

// EngineImage is what importing an image of the local engine needs first:
// its layers' diff IDs (an importer that has them skips the save) and its
// environment.
type EngineImage struct {
	DiffIDs []string
	Env     []string
}

// InspectImage describes image ref of the engine at host.
func InspectImage(ctx context.Context, host, ref string) (EngineImage, error) {
	api, err := engineClient(host)
	if err != nil {
		return EngineImage{}, err
	}
	defer api.Close()
	ins, err := api.ImageInspect(ctx, ref)
	if err != nil {
		return EngineImage{}, fmt.Errorf("inspect image %s: %w", ref, err)
	}
	out := EngineImage{DiffIDs: ins.RootFS.Layers}
	if ins.Config != nil {
		out.Env = ins.Config.Env
	}
	return out, nil
}

// SaveImage writes the engine's `docker save` archive of ref to w.
func SaveImage(ctx context.Context, host, ref string, w io.Writer) error {
	api, err := engineClient(host)
	if err != nil {
		return err
	}
	defer api.Close()
	rc, err := api.ImageSave(ctx, []string{ref})
	if err != nil {
		return fmt.Errorf("save image %s: %w", ref, err)
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil {
		return fmt.Errorf("save image %s: %w", ref, err)
	}
	return nil
}
