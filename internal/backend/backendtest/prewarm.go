package backendtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sandgate/sandgate/internal/backend"
)

// prewarmed is a backend whose Create goes the way the pool's prewarm pool
// does: start a sandbox without a thread (its user data in PrewarmDir),
// move its data dir to the thread and Claim it. A thread with files of its
// own, or an id that already has a sandbox, gets the inner Create, as the
// pool falls back to a cold create. Running the contract on it proves a
// claimed sandbox indistinguishable from a created one.
type prewarmed struct {
	backend.Backend
	binder backend.Binder
}

// Prewarmed wraps b, a backend.Binder binding host dirs. The data dir of
// a spec is read off its workspace mount (backend.ThreadMounts).
func Prewarmed(b backend.Backend) backend.Backend {
	c, ok := b.(backend.Binder)
	if !ok {
		panic(fmt.Sprintf("backendtest: %T cannot claim", b))
	}
	return &prewarmed{Backend: b, binder: c}
}

// createLocks are the per-sandbox locks of every prewarmed instance in the
// process, as the pool's provisioning lock spans its replicas: without
// one, a second create sees the first's adopted, still empty thread dir
// as unused, removes it and moves its own pre-started dir in, and the
// sandbox they agree on writes to a directory no longer the thread's.
var createLocks sync.Map // sandbox id -> *sync.Mutex

func (p *prewarmed) Create(ctx context.Context, spec backend.Spec) (backend.Info, error) {
	mu, _ := createLocks.LoadOrStore(spec.SandboxID, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if info, ok, err := p.Discover(ctx, spec.SandboxID); err != nil || ok {
		return info, err
	}
	mc := backend.MountConfig{DataDir: dataDirOf(spec)}
	if unused, err := backend.ThreadDirUnused(mc.DataDir, spec.User, spec.Thread); mc.DataDir == "" || err != nil || !unused {
		return p.Backend.Create(ctx, spec)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	pw := hex.EncodeToString(b)
	mounts, err := backend.PrewarmMounts(mc, pw)
	if err != nil {
		return backend.Info{}, err
	}
	warmSpec := backend.Spec{SandboxID: pw, Mounts: mounts, Env: spec.Env, Secret: spec.Secret, Egress: spec.Egress}
	labels := maps.Clone(spec.Labels)
	delete(labels, backend.LabelUser)
	delete(labels, backend.LabelThread)
	warmSpec.Labels = backend.IdentityLabels(warmSpec, "", labels)
	warmSpec.Labels[backend.LabelPrewarm] = "contract"
	warm, err := p.Backend.Create(ctx, warmSpec)
	if err != nil {
		return backend.Info{}, fmt.Errorf("prewarm: %w", err)
	}
	err = backend.AdoptPrewarmDirs(mc.DataDir, pw, spec.User, spec.Thread)
	var info backend.Info
	if err == nil {
		info, err = p.binder.Bind(ctx, warm, spec)
	}
	if err != nil {
		// The pool's fallback: the pre-started sandbox goes, the thread is created cold.
		err = errors.Join(p.Backend.Destroy(context.WithoutCancel(ctx), warm), backend.RemovePrewarmDirs(mc.DataDir, pw))
		if err != nil {
			return backend.Info{}, err
		}
		return p.Backend.Create(ctx, spec)
	}
	return info, nil
}

// dataDirOf is the data dir whose ThreadDir holds spec's workspace mount.
func dataDirOf(spec backend.Spec) string {
	suffix := strings.TrimPrefix(backend.ThreadDir("", spec.User, spec.Thread), "/")
	for _, m := range spec.Mounts {
		if m.ContainerPath == backend.VirtualWorkspace {
			if dir, ok := strings.CutSuffix(filepath.Dir(m.HostPath), "/"+suffix); ok {
				return dir
			}
		}
	}
	return ""
}
