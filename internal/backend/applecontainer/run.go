package applecontainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// resolveUser turns Config.User into --user's value ("" = no flag).
func resolveUser(u string) string {
	switch u {
	case "":
		return strconv.Itoa(os.Getuid()) + ":" + strconv.Itoa(os.Getgid())
	case "image":
		return ""
	default:
		return u
	}
}

// validateSpec adds to backend.ValidateSpec what the CLI's flag syntax
// (--mount a=b,c=d) and its env file (one NAME=value a line) cannot carry.
func validateSpec(spec backend.Spec) error {
	if err := backend.ValidateSpec(spec); err != nil {
		return err
	}
	for _, m := range spec.Mounts {
		if strings.ContainsAny(m.ContainerPath+m.HostPath, ",\n") {
			return fmt.Errorf("mount %q -> %q: want paths without commas or newlines", m.HostPath, m.ContainerPath)
		}
	}
	for name, value := range spec.Env {
		if strings.ContainsAny(name, "\n\r#") || strings.ContainsAny(value, "\n\r") {
			return fmt.Errorf("sandbox environment variable %q: names without '#' and single-line values only (the CLI reads them from an env file)", name)
		}
	}
	return nil
}

// envFile is the configured env plus, for the server, HOME = the workspace
// and the names it must not strip (as the docker backend does).
func envFile(env map[string]string) string {
	return strings.Join(backend.ServerEnv(env, backend.VirtualWorkspace, sandboxspec.KeepEnvVar), "\n") + "\n"
}

// runArgs is the `container run` command line for spec (env values stay in
// the env file, never on the command line).
func (a *AppleContainer) runArgs(spec backend.Spec, envPath, incarnation string, created time.Time, f features) []string {
	args := []string{"run", "--detach", "--rm", "--name", a.name(spec.SandboxID)}
	labels := backend.IdentityLabels(spec, a.cfg.Instance, spec.Labels)
	labels[LabelIncarnation] = incarnation
	labels[labelCreated] = created.UTC().Format(time.RFC3339Nano)
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		args = append(args, "--label", k+"="+labels[k])
	}
	args = append(args, "--env-file", envPath)
	for _, m := range spec.Mounts {
		opt := "type=bind,source=" + m.HostPath + ",target=" + m.ContainerPath
		if m.ReadOnly {
			opt += ",readonly"
		}
		args = append(args, "--mount", opt)
	}
	if a.user != "" {
		args = append(args, "--user", a.user)
	}
	if a.cfg.CPUs > 0 {
		args = append(args, "--cpus", strconv.Itoa(a.cfg.CPUs))
	}
	// A template's memory and image replace the configured ones.
	if memory := cmp.Or(max(spec.Template.Memory, 0), a.cfg.Memory); memory > 0 {
		args = append(args, "--memory", strconv.FormatInt(max(memory>>20, 1), 10)+"M")
	}
	if f.capDrop {
		args = append(args, "--cap-drop", "ALL")
		for _, c := range a.cfg.CapAdd {
			args = append(args, "--cap-add", c)
		}
	}
	if f.init {
		args = append(args, "--init")
	}
	return append(args, "--entrypoint", sandboxspec.ServerImagePath, cmp.Or(spec.Template.Image, a.cfg.Image), sandboxspec.ServerCommand,
		"--"+sandboxspec.FlagListen, "0.0.0.0:"+strconv.Itoa(a.cfg.Port), "--"+sandboxspec.FlagHome, backend.VirtualWorkspace)
}

// Create runs the sandbox's container and returns once it answers, or
// returns the one already running under its name.
func (a *AppleContainer) Create(ctx context.Context, spec backend.Spec) (backend.Info, error) {
	if err := validateSpec(spec); err != nil {
		return backend.Info{}, err
	}
	if err := backend.EnsureHostDirs(spec.Mounts); err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", spec.SandboxID, err)
	}
	sid, name := spec.SandboxID, a.name(spec.SandboxID)
	log := a.log.With("sandbox_id", sid, "thread", spec.Thread)
	if info, ok, err := a.adoptExisting(ctx, name, sid, log); err != nil || ok {
		return info, err
	}
	began := time.Now()
	f, err := os.CreateTemp("", "sandgate-env-*") // 0600
	if err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: env file: %w", sid, err)
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(envFile(spec.Env))
	if err = errors.Join(err, f.Close()); err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: env file: %w", sid, err)
	}
	inc := nonce()
	if _, err := a.cli(ctx, a.runArgs(spec, f.Name(), inc, began, a.detectFeatures())...); err != nil {
		// A concurrent creator may have taken the name: adopt its container.
		if info, ok, aerr := a.adoptExisting(ctx, name, sid, log); aerr == nil && ok {
			return info, nil
		}
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", sid, err)
	}
	info, err := a.await(ctx, name, sid, inc)
	if err != nil {
		a.remove(name, log)
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", sid, err)
	}
	log.Info("sandbox created", "container", name, "url", info.URL, "duration", time.Since(began).Round(time.Millisecond).String())
	return info, nil
}

// await finds the container just run and waits until it answers.
func (a *AppleContainer) await(ctx context.Context, name, sid, inc string) (backend.Info, error) {
	s, found, err := a.find(ctx, name)
	if err != nil {
		return backend.Info{}, err
	}
	if !found || !s.running() || s.Configuration.Labels[LabelIncarnation] != inc {
		return backend.Info{}, errors.New("the container stopped right after it was run")
	}
	info, err := a.info(s)
	if err != nil {
		return backend.Info{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, a.cfg.ReadyTimeout)
	defer cancel()
	return info, backend.WaitReady(rctx, info.URL)
}

// adoptExisting handles a container already under the name: ours and
// answering is returned; stopped or hung is removed (false: run a new one);
// someone else's is an error.
func (a *AppleContainer) adoptExisting(ctx context.Context, name, sid string, log *slog.Logger) (backend.Info, bool, error) {
	s, found, err := a.find(ctx, name)
	if err != nil || !found {
		return backend.Info{}, false, err
	}
	if !ours(s, sid) {
		return backend.Info{}, false, fmt.Errorf("create sandbox %s: the name %s is taken by a container Sandgate did not make; remove it", sid, name)
	}
	if s.running() {
		info, err := a.info(s)
		if err == nil {
			rctx, cancel := context.WithTimeout(ctx, a.cfg.ReadyTimeout)
			err = backend.WaitReady(rctx, info.URL)
			cancel()
		}
		if err == nil {
			log.Info("sandbox already running", "container", name)
			return info, true, nil
		}
		if ctx.Err() != nil {
			return backend.Info{}, false, fmt.Errorf("create sandbox %s: %w", sid, ctx.Err())
		}
		log.Warn("replacing unresponsive sandbox container", "container", name, "err", err)
	}
	a.remove(name, log)
	return backend.Info{}, false, nil
}

// remove force-deletes a container on a fresh context (a failed create's
// context may be what failed it); a missing one is fine.
func (a *AppleContainer) remove(name string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	if _, err := a.cli(ctx, "delete", "--force", name); err != nil {
		if _, found, ferr := a.find(ctx, name); ferr == nil && !found {
			return
		}
		log.Warn("remove sandbox container", "container", name, "err", err)
	}
}
