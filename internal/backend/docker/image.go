package docker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"

	"github.com/sandgate/sandgate/internal/backend"
)

// pullLogEvery is how often a running pull logs its progress.
const pullLogEvery = 2 * time.Second

// prepareImage makes image ref present as the pull policy says and returns
// its LabelServer value ("" for an image that serves the API itself).
func (d *Docker) prepareImage(ctx context.Context, ref string) (string, error) {
	if d.cfg.PullPolicy == PullAlways {
		if err := d.pull(ctx, ref); err != nil {
			return "", err
		}
	}
	img, err := d.api.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		if d.cfg.PullPolicy == PullNever {
			return "", &backend.ImageError{Image: ref, Err: errNeverPull}
		}
		if err = d.pull(ctx, ref); err == nil {
			img, err = d.api.ImageInspect(ctx, ref)
		}
	}
	if err != nil {
		return "", engineErr("image "+ref, err)
	}
	if img.Config == nil {
		return "", nil
	}
	return img.Config.Labels[LabelServer], nil
}

var errNeverPull = errors.New("not present and docker_pull_policy is never: build or load it first (see deployments/sandbox-image)")

// CheckImage is the start-up check of the sandbox image and of templates'
// images (more): present, or (pull policy allowing) pulled now in the
// background so that the first create does not wait for it. A missing
// image is logged as an error naming it; /readyz (Ping) reports the
// configured one until it is there.
func (d *Docker) CheckImage(ctx context.Context, more ...string) {
	seen := map[string]bool{}
	for _, ref := range append([]string{d.cfg.Image}, more...) {
		if ref == "" || seen[ref] {
			continue
		}
		seen[ref] = true
		d.checkImage(ctx, ref)
	}
}

func (d *Docker) checkImage(ctx context.Context, ref string) {
	err := d.imagePresent(ctx, ref)
	var missing *backend.ImageError
	switch {
	case err == nil:
		return
	case !errors.As(err, &missing):
		d.log.Warn("cannot check the sandbox image at start-up", "image", ref, "err", err)
	case d.cfg.PullPolicy == PullNever:
		d.log.Error("sandbox image missing: sandboxes cannot start until it is built or loaded (docker_pull_policy is never)",
			"image", ref)
	default:
		d.log.Warn("sandbox image missing at start-up; pulling it now", "image", ref)
		go func() {
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startupPullTimeout)
			defer cancel()
			if err := d.pull(pctx, ref); err != nil {
				d.log.Error("sandbox image could not be pulled", "image", ref, "err", err)
			}
		}()
	}
}

// startupPullTimeout bounds CheckImage's background pull.
const startupPullTimeout = 15 * time.Minute

// imagePresent is one inspect: nil, an *backend.ImageError when the engine
// answers that the image is missing, or the engine's error.
func (d *Docker) imagePresent(ctx context.Context, ref string) error {
	_, err := d.api.ImageInspect(ctx, ref)
	switch {
	case err == nil:
		return nil
	case cerrdefs.IsNotFound(err):
		return &backend.ImageError{Image: ref, Err: errors.New("not present on the engine")}
	}
	return fmt.Errorf("%w: docker engine: inspect image: %w", backend.ErrUnavailable, err)
}

// pull pulls image ref once at a time however many creates ask for it.
// Every create waiting for the pull, not only the one that started it,
// gets its progress (backend.WithProgress) from the moment it asks.
func (d *Docker) pull(ctx context.Context, ref string) error {
	if report := backend.ProgressOf(ctx); report != nil {
		defer d.pullWatch.add(ref, report)()
	}
	_, err, _ := d.pulls.Do(ref, func() (any, error) {
		log := d.log.With("image", ref)
		log.Info("pulling image", "policy", d.cfg.PullPolicy)
		began := time.Now()
		rc, err := d.api.ImagePull(ctx, ref, image.PullOptions{})
		if err == nil {
			err = followPull(rc, log, pullLogEvery, time.Now, func(p backend.Progress) { d.pullWatch.report(ref, p) })
			_ = rc.Close()
		}
		if err != nil {
			err = engineErr("pull", err)
			if !errors.Is(err, backend.ErrUnavailable) {
				err = &backend.ImageError{Image: ref, Err: fmt.Errorf("not present and could not be pulled: %w", err)}
			}
			return nil, err
		}
		log.Info("image pulled", "duration", time.Since(began).Round(time.Millisecond).String())
		return nil, nil
	})
	return err
}

// pullMessage is one line of the engine's pull progress stream.
type pullMessage struct {
	Status   string `json:"status"`
	ID       string `json:"id"`
	Progress struct {
		Current int64 `json:"current"`
		Total   int64 `json:"total"`
	} `json:"progressDetail"`
	Error       string `json:"error"`
	ErrorDetail struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
}

// followPull reads a pull's progress stream to its end, logging image-level
// lines as they come and the layers' download progress at most once per
// every; an error line in the stream is the pull's error. report gets the
// bytes downloaded of the layers' known total after every layer line, and
// a last report (Done) when the stream ends well.
func followPull(r io.Reader, log *slog.Logger, every time.Duration, now func() time.Time, report func(backend.Progress)) error {
	type layer struct{ current, total int64 }
	layers := map[string]*layer{}
	done := map[string]bool{}
	sum := func() (cur, total int64) {
		for _, l := range layers {
			cur, total = cur+l.current, total+l.total
		}
		return cur, total
	}
	next := now().Add(every)
	dec := json.NewDecoder(r)
	for {
		var m pullMessage
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			cur, total := sum()
			report(backend.Progress{Step: backend.StepPulling, Bytes: cur, Total: total, Done: true})
			return nil
		} else if err != nil {
			return fmt.Errorf("read pull progress: %w", err)
		}
		if m.Error != "" || m.ErrorDetail.Message != "" {
			return errors.New(cmp.Or(m.ErrorDetail.Message, m.Error))
		}
		if m.ID == "" || strings.HasPrefix(m.Status, "Pulling from ") {
			// Image-level lines: "Pulling from ...", "Digest: ...", "Status: ...".
			log.Info("pull", "status", m.Status, "ref", m.ID)
			continue
		}
		l := layers[m.ID]
		if l == nil {
			l = &layer{}
			layers[m.ID] = l
		}
		switch m.Status {
		case "Downloading":
			l.current, l.total = m.Progress.Current, m.Progress.Total
		case "Download complete", "Pull complete", "Already exists":
			l.current = l.total
			done[m.ID] = true
		}
		cur, total := sum()
		report(backend.Progress{Step: backend.StepPulling, Bytes: cur, Total: total})
		if t := now(); !t.Before(next) {
			next = t.Add(every)
			log.Info("pull progress", "layers_done", len(done), "layers", len(layers),
				"downloaded_mb", cur>>20, "known_total_mb", total>>20)
		}
	}
}

// pullWatchers are the progress reports of the creates waiting for a pull,
// each for the image it waits for (templates pull images of their own).
type pullWatchers struct {
	mu   sync.Mutex
	next int
	fns  map[int]pullWatcher
}

type pullWatcher struct {
	ref    string
	report func(backend.Progress)
}

// add registers report for ref's pull until the returned func is called.
func (w *pullWatchers) add(ref string, report func(backend.Progress)) (remove func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fns == nil {
		w.fns = map[int]pullWatcher{}
	}
	id := w.next
	w.next++
	w.fns[id] = pullWatcher{ref, report}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.fns, id)
	}
}

// report hands p, ref's pull progress, to every create waiting for ref. The
// lock is held throughout: the reports are quick (a rate check, now and
// then an event), and a create that stops waiting must not be reported to
// afterwards.
func (w *pullWatchers) report(ref string, p backend.Progress) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.fns {
		if f.ref == ref {
			f.report(p)
		}
	}
}
