package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandgate/sandgate/internal/backend"
)

const (
	// createdGrace is how long a container may sit created-but-not-started
	// before it counts as abandoned by a creator that died.
	createdGrace = 30 * time.Second
	// logTailLines is how much of a failed container's log an error carries.
	logTailLines = "20"
)

// Create starts the sandbox's container and returns once it answers GET
// /v1/sandbox. The container name is the cross-process lock: a creator that
// finds the name taken adopts the container under it (waiting for a
// concurrent creator's start), or clears a dead or hung one and tries again,
// so two gateways racing on one thread end up with one container.
func (d *Docker) Create(ctx context.Context, spec backend.Spec) (backend.Info, error) {
	if err := backend.ValidateSpec(spec); err != nil {
		return backend.Info{}, err
	}
	if err := backend.EnsureHostDirs(spec.Mounts); err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", spec.SandboxID, err)
	}
	sid := spec.SandboxID
	log := d.log.With("sandbox_id", sid, "thread", spec.Thread)
	serverPath, err := d.prepareImage(ctx, d.image(spec.Template))
	if err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", sid, err)
	}
	cs := d.containerSpec(spec, serverPath)
	if err := cs.User.prepareDirs(spec.Mounts); err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", sid, err)
	}
	if serverPath == "" && spec.Egress.EffectiveMode() != backend.EgressOpen {
		d.egressWarning.Do(func() {
			d.log.Warn("the sandbox image serves its own API over TCP, so its containers need a network: their egress policy "+
				"is not enforced (only images with the "+LabelServer+" label run without a network)", "image", cs.Config.Image,
				"egress", spec.Egress.EffectiveMode())
		})
	}
	if serverPath != "" {
		if err := d.prepareSockets(ctx, spec); err != nil {
			return backend.Info{}, fmt.Errorf("create sandbox %s: %w", sid, err)
		}
	}
	began := time.Now()
	for wait := 20 * time.Millisecond; ; wait = min(wait*2, 250*time.Millisecond) {
		resp, err := d.api.ContainerCreate(ctx, cs.Config, cs.Host, cs.Network, nil, cs.Name)
		if err == nil {
			info, err := d.start(ctx, resp.ID, cs, log)
			if err != nil {
				return backend.Info{}, fmt.Errorf("create sandbox %s: %w", sid, err)
			}
			log.Info("sandbox created", "container", shortID(info.Incarnation), "url", backend.LogURL(info.URL),
				"duration", time.Since(began).Round(time.Millisecond).String())
			return info, nil
		}
		if !cerrdefs.IsConflict(err) {
			return backend.Info{}, d.createErr(sid, err)
		}
		info, ok, err := d.adoptExisting(ctx, cs.Name, sid, log)
		if err != nil || ok {
			return info, err
		}
		// Cleared, or not yet inspectable: the engine reserves a name before
		// the container it names can be inspected. Try again shortly.
		if err := sleep(ctx, wait); err != nil {
			return backend.Info{}, fmt.Errorf("create sandbox %s: name %s still taken: %w", sid, cs.Name, err)
		}
	}
}

// start delivers the secret into container id, which this call created
// from cs, starts it and waits until it serves; on failure the container
// is removed.
func (d *Docker) start(ctx context.Context, id string, cs containerSpec, log *slog.Logger) (backend.Info, error) {
	var err error
	if cs.Secret != "" {
		err = d.deliverSecret(ctx, id, cs)
	}
	if err == nil {
		if err = d.api.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
			err = engineErr("start container", err)
		}
	}
	var info backend.Info
	if err == nil {
		info, err = d.inspectInfo(ctx, id)
		if err != nil { // an exited container has no ports: say why it exited
			err = errors.Join(err, d.exitedErr(ctx, id))
		}
	}
	if err == nil {
		err = d.waitReady(ctx, id, info.URL, info.Secret)
	}
	if err != nil {
		d.discard(id, log)
		return backend.Info{}, err
	}
	return info, nil
}

// adoptExisting deals with a container already holding the sandbox's name:
// a running one that answers is returned (a paused one is unpaused first);
// one a concurrent creator has not started yet is waited for; a stopped,
// abandoned or unresponsive one is removed, and false tells the caller to
// create again. A container Sandgate did not make is never touched.
func (d *Docker) adoptExisting(ctx context.Context, name, sid string, log *slog.Logger) (backend.Info, bool, error) {
	wait := 20 * time.Millisecond
	for {
		c, err := d.api.ContainerInspect(ctx, name)
		if cerrdefs.IsNotFound(err) {
			return backend.Info{}, false, nil // removed meanwhile, or not registered yet
		}
		if err != nil {
			return backend.Info{}, false, engineErr("inspect container "+name, err)
		}
		it, ok := d.identifyInspect(c)
		if !ok || !it.is(sid) {
			return backend.Info{}, false, fmt.Errorf("create sandbox %s: the name %s is taken by a container Sandgate did not make; remove or rename it", sid, name)
		}
		st := c.State
		switch {
		case it.state == orphaned:
			// A claimed sandbox whose record is lost: it can no longer be
			// told to be this thread's, so it makes way (the files are on
			// the host).
			log.Warn("removing a claimed pre-started container without its claim record", "container", shortID(c.ID), "prewarm_id", it.rid)
			if err := d.stopAndRemove(ctx, c); err != nil {
				return backend.Info{}, false, err
			}
			d.dropRuntime(it)
			return backend.Info{}, false, nil
		case st.Running:
			return d.adoptRunning(ctx, c, sid, log)
		case st.Status == container.StateRemoving,
			st.Status == container.StateCreated && time.Since(parseTime(c.Created)) < createdGrace:
			// Another process is removing it, or is about to start it.
		default:
			log.Info("removing stopped sandbox container", "container", shortID(c.ID), "state", st.Status, "exit_code", st.ExitCode)
			if err := d.remove(ctx, c.ID); err != nil {
				return backend.Info{}, false, err
			}
			d.dropRuntime(it)
			return backend.Info{}, false, nil
		}
		if err := sleep(ctx, wait); err != nil {
			return backend.Info{}, false, fmt.Errorf("create sandbox %s: %w", sid, err)
		}
		wait = min(wait*2, 250*time.Millisecond)
	}
}

// adoptRunning returns a running container once it answers, giving it the
// full ReadyTimeout (a busy sandbox must not lose its commands for being
// slow); one that never answers is removed as hung.
func (d *Docker) adoptRunning(ctx context.Context, c container.InspectResponse, sid string, log *slog.Logger) (backend.Info, bool, error) {
	if c.State.Paused {
		if err := d.unpause(ctx, c.ID); err != nil {
			return backend.Info{}, false, err
		}
	}
	info, err := d.infoFromInspect(c)
	if err == nil {
		err = d.waitReady(ctx, c.ID, info.URL, info.Secret)
	}
	if err == nil {
		log.Info("sandbox already running", "container", shortID(c.ID))
		return info, true, nil
	}
	if ctx.Err() != nil {
		return backend.Info{}, false, fmt.Errorf("create sandbox %s: %w", sid, ctx.Err())
	}
	log.Warn("replacing unresponsive sandbox container", "container", shortID(c.ID), "err", err)
	return backend.Info{}, false, d.remove(ctx, c.ID)
}

// waitReady polls the sandbox until it answers, giving up at once if the
// container exits (with the tail of its log in the error).
func (d *Docker) waitReady(ctx context.Context, id, url, secret string) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ReadyTimeout)
	defer cancel()
	wctx, stopWait := context.WithCancel(ctx)
	defer stopWait()
	exited := make(chan int64, 1)
	results, errs := d.api.ContainerWait(wctx, id, container.WaitConditionNotRunning)
	go func() {
		select {
		case r := <-results:
			exited <- r.StatusCode
			cancel()
		case <-errs: // the wait ended (or failed): readiness decides alone
		}
	}()
	err := backend.WaitReadySecret(ctx, url, secret)
	if err == nil {
		return nil
	}
	select {
	case code := <-exited:
		return d.exitedBeforeReady(id, code)
	default:
		return err
	}
}

// exitedErr is the exit of a container that stopped right after its start,
// or nil while it runs.
func (d *Docker) exitedErr(ctx context.Context, id string) error {
	c, err := d.api.ContainerInspect(ctx, id)
	if err != nil || c.State == nil || c.State.Running {
		return nil
	}
	return d.exitedBeforeReady(id, int64(c.State.ExitCode))
}

func (d *Docker) exitedBeforeReady(id string, code int64) error {
	return fmt.Errorf("sandbox container exited with status %d before it was ready; its last log lines:\n%s", code, d.logTail(id))
}

// logTail returns the last lines a container wrote, for error messages.
func (d *Docker) logTail(id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rc, err := d.api.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: logTailLines})
	if err != nil {
		return "(logs unavailable: " + err.Error() + ")"
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := stdcopy.StdCopy(&buf, &buf, rc); err != nil && buf.Len() == 0 {
		return "(logs unavailable: " + err.Error() + ")"
	}
	const maxLen = 4 << 10
	out := strings.TrimSpace(buf.String())
	if len(out) > maxLen {
		out = "..." + out[len(out)-maxLen:]
	}
	return out
}

// discard removes a container whose creation failed, on a fresh context:
// the caller's may be what ended the creation.
func (d *Docker) discard(id string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.StopTimeout+10*time.Second)
	defer cancel()
	if err := d.remove(ctx, id); err != nil {
		log.Warn("remove failed sandbox container", "container", shortID(id), "err", err)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
