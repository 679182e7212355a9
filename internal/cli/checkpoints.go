package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/internal/api"
)

// The thread commands call a user's /threads routes, which act as the
// credential's own user; with --user an admin credential acts on that
// user's thread (?user=, which the gateway refuses to anyone else).

// threadClient is a client of the /threads routes.
func threadClient(c common) (*client, error) {
	cl, err := newClient(c)
	if err != nil {
		return nil, err
	}
	cl.credential = "a credential of the thread's user"
	return cl, nil
}

func threadPath(thread string) string { return "/threads/" + url.PathEscape(thread) }

func checkpointTable(env Env, list []api.Checkpoint) error {
	t := newTable(env.Stdout, "CHECKPOINT ID", "LABEL", "AGE", "SIZE", "FILES", "LINKED", "METHOD")
	now := time.Now()
	for _, cp := range list {
		label := cp.Label
		if label == "" {
			label = "-"
		}
		t.row(cp.ID, label, age(cp.CreatedAt, now), bytesIEC(cp.Size), strconv.Itoa(cp.Files), strconv.Itoa(cp.Linked), string(cp.Method))
	}
	return t.flush()
}

func runCheckpointCreate(ctx context.Context, env Env, args []string) error {
	var c common
	var label string
	fs := newUserThreadFlags(env, "checkpoint create", "checkpoint create THREAD [--label L]   (the sandbox is frozen while its workspace is copied)", &c)
	fs.StringVar(&label, "label", "", "a label to remember the checkpoint by")
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("checkpoint create: want exactly one thread id")
	}
	cl, err := threadClient(c)
	if err != nil {
		return err
	}
	var cp api.Checkpoint
	if err := cl.send(ctx, "POST", threadPath(pos[0])+"/checkpoints", c.userQuery(), api.CreateCheckpoint{Label: label}, &cp); err != nil {
		return err
	}
	if cp.Skipped > 0 {
		fmt.Fprintf(env.Stderr, "gateway: left %d special files (sockets, devices) out of the checkpoint\n", cp.Skipped)
	}
	if c.output == "json" {
		return writeJSON(env.Stdout, cp)
	}
	return checkpointTable(env, []api.Checkpoint{cp})
}

func runCheckpointList(ctx context.Context, env Env, args []string) error {
	var c common
	fs := newUserThreadFlags(env, "checkpoint ls", "checkpoint ls THREAD [-o json]   (newest first)", &c)
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("checkpoint ls: want exactly one thread id")
	}
	cl, err := threadClient(c)
	if err != nil {
		return err
	}
	var list api.CheckpointList
	if err := cl.call(ctx, "GET", threadPath(pos[0])+"/checkpoints", c.userQuery(), &list); err != nil {
		return err
	}
	if c.output == "json" {
		return writeJSON(env.Stdout, list)
	}
	return checkpointTable(env, list.Checkpoints)
}

func runCheckpointRestore(ctx context.Context, env Env, args []string) error {
	var c common
	var force bool
	fs := newUserThreadFlags(env, "checkpoint restore", "checkpoint restore THREAD ID [--force]   (the workspace becomes the checkpoint's; the sandbox keeps running)", &c)
	fs.BoolVar(&force, "force", false, "restore even while the sandbox runs a command (its processes are frozen during the swap)")
	fs.BoolVar(&force, "f", false, "same as --force")
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("checkpoint restore: want a thread id and a checkpoint id")
	}
	cl, err := threadClient(c)
	if err != nil {
		return err
	}
	var out api.Restored
	path := threadPath(pos[0]) + "/checkpoints/" + url.PathEscape(pos[1]) + "/restore"
	err = cl.send(ctx, "POST", path, c.userQuery(), api.RestoreCheckpoint{Force: force}, &out)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict && ae.Code == "sandbox_busy" {
		return fmt.Errorf("%w\nRun again with --force to restore under the running command (its processes are frozen during the swap)", err)
	}
	if err != nil {
		return err
	}
	if c.output == "json" {
		return writeJSON(env.Stdout, out)
	}
	what := out.Restored.ID
	if out.Restored.Label != "" {
		what += " (" + out.Restored.Label + ")"
	}
	_, err = fmt.Fprintf(env.Stdout, "%s: restored checkpoint %s\n", out.Thread, what)
	return err
}

func runCheckpointRm(ctx context.Context, env Env, args []string) error {
	var c common
	fs := newUserThreadFlags(env, "checkpoint rm", "checkpoint rm THREAD ID...", &c)
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return usagef("checkpoint rm: want a thread id and at least one checkpoint id")
	}
	cl, err := threadClient(c)
	if err != nil {
		return err
	}
	thread, ids := pos[0], pos[1:]
	deleted := []string{}
	err = eachID(env, ids, func(id string) error {
		if err := cl.call(ctx, "DELETE", threadPath(thread)+"/checkpoints/"+url.PathEscape(id), c.userQuery(), nil); err != nil {
			return err
		}
		deleted = append(deleted, id)
		if c.output == "table" {
			fmt.Fprintln(env.Stdout, id) // docker rm prints what it removed
		}
		return nil
	})
	if c.output == "json" {
		return errors.Join(writeJSON(env.Stdout, map[string]any{"thread": thread, "deleted": deleted}), err)
	}
	return err
}

func runFork(ctx context.Context, env Env, args []string) error {
	var c common
	var from string
	fs := newUserThreadFlags(env, "fork", "fork THREAD NEW_THREAD [--checkpoint ID]   (NEW_THREAD gets a copy of the workspace and a sandbox of its own)", &c)
	fs.StringVar(&from, "checkpoint", "", "copy this checkpoint of THREAD (default: its current workspace)")
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("fork: want a thread id and the new thread's id")
	}
	cl, err := threadClient(c)
	if err != nil {
		return err
	}
	req := api.Fork{Thread: pos[1], Checkpoint: from}
	var v api.Sandbox
	if err := cl.send(ctx, "POST", threadPath(pos[0])+"/fork", c.userQuery(), req, &v); err != nil {
		return err
	}
	if c.output == "json" {
		return writeJSON(env.Stdout, v)
	}
	source := pos[0] + " (its current workspace)"
	if from != "" {
		source = pos[0] + " (checkpoint " + from + ")"
	}
	return sandboxTable(env, v, [2]string{"Forked from:", source})
}

func runFreeze(ctx context.Context, env Env, args []string) error {
	var c common
	fs := newUserThreadFlags(env, "freeze", "freeze THREAD   (stops the sandbox's processes, memory kept; its next request thaws it)", &c)
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("freeze: want exactly one thread id")
	}
	cl, err := threadClient(c)
	if err != nil {
		return err
	}
	var out api.Frozen
	if err := cl.call(ctx, "POST", threadPath(pos[0])+"/sandbox/freeze", c.userQuery(), &out); err != nil {
		return err
	}
	if c.output == "json" {
		return writeJSON(env.Stdout, out)
	}
	_, err = fmt.Fprintf(env.Stdout, "%s: frozen\n", out.Thread)
	return err
}
