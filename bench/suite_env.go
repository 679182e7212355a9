package main

import (
	"context"
	"os"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
)

// suiteEnv is what the suites that run gateways start from: a scratch
// directory, the run's gateway build and a real redis-server.
type suiteEnv struct {
	tmp, bin, redisAddr string
	// cleanup stops what the suite started, last in first out, before
	// Redis (pushed first) stops.
	cleanup cleanupStack
}

func startSuiteEnv(ctx context.Context, name string) (_ *suiteEnv, err error) {
	e := &suiteEnv{}
	if e.tmp, err = os.MkdirTemp("", "sandgate-bench-"+name+"-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.bin, err = buildGateway(ctx); err != nil {
		return nil, err
	}
	rs, addr, err := startRedis(ctx, e.tmp)
	if err != nil {
		return nil, err
	}
	e.redisAddr = addr
	e.cleanup.push(func(context.Context) { rs.stop(syscall.SIGTERM, 5*time.Second) })
	return e, nil
}

// close runs the cleanup, then removes the scratch directory.
func (e *suiteEnv) close() {
	e.cleanup.run()
	_ = os.RemoveAll(e.tmp)
}

// benchSpec is the spec of the bench user's thread, with its real mounts
// under dataDir (made here, so a measured Create finds them) and the
// gateway's sandbox id.
func benchSpec(dataDir, thread string) (backend.Spec, error) {
	mounts, err := backend.ThreadMounts(backend.MountConfig{DataDir: dataDir}, "bench", thread)
	if err != nil {
		return backend.Spec{}, err
	}
	if err := backend.EnsureHostDirs(mounts); err != nil {
		return backend.Spec{}, err
	}
	return backend.Spec{SandboxID: identity.SandboxID("bench", thread), User: "bench", Thread: thread, Mounts: mounts}, nil
}
