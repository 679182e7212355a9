package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/usage"
)

var _ backend.LayerMeter = (*Process)(nil)

// layerName is the writable image layer's dir in the sandbox's user data
// dir (the parent of its workspace: ThreadDir, or PrewarmDir until a thread
// claims it, when it moves with the rest). It is bound into no sandbox:
// only the overlay of the sandbox it belongs to writes it. Being in the
// thread's data, it is measured with it (thread_data_quota).
const layerName = "image-layer"

// layered reports whether sandboxes of cfg (the backend's, or a template's:
// forTemplate) get a writable layer over their image root.
func (p *Process) layered(cfg Config) bool {
	return cfg.SystemRoot != "" && !p.cfg.ReadOnlyImage && p.cgroups != nil && os.Geteuid() == 0
}

// layerFor is the writable layer dir of spec's sandbox, "" when it gets
// none (no image root, the layer turned off, a gateway that is not root,
// no workspace to keep it beside).
func (p *Process) layerFor(spec backend.Spec) string {
	if !p.layered(p.cfg.forTemplate(spec.Template)) {
		return ""
	}
	return layerDir(spec.Mounts)
}

// layerDir is the layer dir beside mounts' workspace; "" without one.
func layerDir(mounts []backend.Mount) string {
	for _, m := range mounts {
		if m.ContainerPath == backend.VirtualWorkspace {
			return filepath.Join(filepath.Dir(m.HostPath), layerName)
		}
	}
	return ""
}

// removeLayer deletes a sandbox's layer once its processes are gone: what
// it installed goes with it. The walk unlinks symlinks, never follows them.
func (p *Process) removeLayer(sid, dir string) {
	if dir == "" {
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) { // its path is the host's: not logged
			err = fmt.Errorf("%s: %w", pe.Op, pe.Err)
		}
		p.log.Warn("remove sandbox image layer", "sandbox_id", sid, "err", err)
	}
}

// LayerBytes is what info's incarnation's image layer takes on disk (a
// bounded walk, usage.Measure: what it installed or changed in its image;
// the layer is in the thread's data, so that figure counts it too).
func (p *Process) LayerBytes(ctx context.Context, info backend.Info) (int64, bool, error) {
	st, err := p.readState(info.SandboxID)
	if err != nil || st == nil || st.Incarnation != info.Incarnation || st.Layer == "" {
		return 0, false, err
	}
	u, err := usage.Measure(ctx, st.Layer, usage.Bounds{})
	if pe, ok := errors.AsType[*os.PathError](err); ok { // its path is the host's: not told
		err = fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	if err != nil {
		return 0, false, fmt.Errorf("measure sandbox %s image layer: %w", info.SandboxID, err)
	}
	return u.Bytes, true, nil
}

// logLayers says at start-up whether image roots are writable per sandbox.
func (p *Process) logLayers() {
	switch {
	case p.cfg.ReadOnlyImage:
		p.log.Info("image layer: off (process_read_only_image): image roots are read-only in every sandbox")
	case os.Geteuid() != 0:
		p.log.Warn("image layer: off: the gateway is not root, so it cannot idmap an image; image roots are " +
			"read-only in sandboxes and nothing installs system-wide (pip install --user or a venv in the workspace does)")
	default:
		p.log.Info("image layer: on: each sandbox of an image root gets a writable layer over it, in its thread's data, removed with the sandbox")
	}
}
