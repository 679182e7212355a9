package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sandgate/sandgate/internal/api"
)

// Sandgate's own tools, beyond DeerFlow's: checkpoints of the thread's
// files and forks. They call the thread's control-plane routes
// (/threads/{thread}/checkpoints, /threads/{thread}/fork) through the same
// in-process gateway and credential as the sandbox tools.

// longTimeout bounds one checkpoint, restore, fork or template change: a
// copy of the whole user-data tree when the filesystem cannot reflink, and
// for a fork or a template the new sandbox's provisioning.
const longTimeout = 10 * time.Minute

// userData is what a checkpoint holds: the thread's files, all three mounts.
const userData = "/mnt/user-data"

type (
	checkpointIn struct {
		Label string `json:"label,omitempty" jsonschema:"Optional short note of the state being saved, for example 'before switching the parser to streaming'."`
	}
	listCheckpointsIn   struct{}
	restoreCheckpointIn struct {
		ID    string `json:"id" jsonschema:"The checkpoint id (ck-...) that checkpoint or list_checkpoints returned."`
		Force bool   `json:"force,omitempty" jsonschema:"Restore even while a command is still running in the sandbox: it is paused during the swap and then sees the restored files. Default is false."`
	}
	forkThreadIn struct {
		Thread     string `json:"thread" jsonschema:"The new thread's id: 1-128 characters of [A-Za-z0-9._:-], a thread that does not exist yet."`
		Checkpoint string `json:"checkpoint,omitempty" jsonschema:"Optional id of a checkpoint of this thread to start from. Omit to copy the current files."`
	}
)

func addCheckpointTools(srv *sdk.Server, t tools) {
	additive := false
	sdk.AddTool(srv, &sdk.Tool{Name: "checkpoint", Description: "Save a checkpoint of this thread's files (everything under " +
		userData + ": workspace, uploads, outputs) so that restore_checkpoint can undo later changes. Checkpoint before a risky " +
		"change (a large refactor or rewrite, deleting or regenerating many files, a migration, running an unfamiliar script) " +
		"and at known-good points. It is quick and cheap: unchanged files are shared with the previous checkpoint. It saves " +
		"files only, not running processes nor files outside " + userData + " (installed packages, /tmp). The gateway keeps " +
		"only the most recent checkpoints. Returns the checkpoint's id.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &additive}}, t.checkpoint)
	sdk.AddTool(srv, &sdk.Tool{Name: "list_checkpoints", Description: "List this thread's checkpoints, newest first: id, label, " +
		"time, files and size. Use it to find the checkpoint to restore after a bad turn.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.listCheckpoints)
	sdk.AddTool(srv, &sdk.Tool{Name: "restore_checkpoint", Description: "Undo: roll this thread's files under " + userData +
		" back to a checkpoint, discarding every change made since (files created since are removed). Use it to undo a bad " +
		"turn or a risky change that failed. Processes keep running and see the restored files: restart a server that " +
		"caches them. Checkpoint first if you may want the current state back. It may be refused while a command is " +
		"still running in the sandbox; force=true restores anyway."}, t.restoreCheckpoint)
	sdk.AddTool(srv, &sdk.Tool{Name: "fork_thread", Description: "Copy this thread's files (as they are now, or as of one of " +
		"its checkpoints) into a new thread with a sandbox of its own, to try an alternative approach while this thread " +
		"stays as it is; from then on the two are independent. This server keeps working on this thread; the new one has " +
		"its own MCP endpoint, /threads/{thread}/mcp. Returns the new thread's sandbox id.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &additive}}, t.forkThread)
}

func (t tools) checkpoint(ctx context.Context, _ *sdk.CallToolRequest, in checkpointIn) (*sdk.CallToolResult, any, error) {
	var cp api.Checkpoint
	err := t.sb.control(ctx, longTimeout, http.MethodPost, "/checkpoints", api.CreateCheckpoint{Label: in.Label}, &cp)
	if c := code(err); c == "not_found" || c == "checkpoint_not_found" { // not_found: no workspace (older gateways: checkpoint_not_found)
		return fail("Error: this thread has no files yet, so there is nothing to checkpoint")
	}
	if err != nil {
		return controlFailed(err, "creating a checkpoint")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Created checkpoint %s%s: %d files, %d bytes, copied by %s", cp.ID, labelled(cp.Label), cp.Files, cp.Size, cp.Method)
	if cp.Linked > 0 {
		fmt.Fprintf(&b, " (%d files unchanged since the previous checkpoint are shared with it)", cp.Linked)
	}
	b.WriteString(".")
	if cp.Skipped > 0 {
		fmt.Fprintf(&b, " %d special files (sockets, devices) were left out.", cp.Skipped)
	}
	fmt.Fprintf(&b, " To return to this state: restore_checkpoint with id %s.", cp.ID)
	return text(b.String())
}

func (t tools) listCheckpoints(ctx context.Context, _ *sdk.CallToolRequest, _ listCheckpointsIn) (*sdk.CallToolResult, any, error) {
	var list api.CheckpointList
	err := t.sb.control(ctx, fileTimeout, http.MethodGet, "/checkpoints", nil, &list)
	if code(err) == "not_found" { // the thread has no files yet: no checkpoints either
		err, list.Checkpoints = nil, nil
	}
	if err != nil {
		return controlFailed(err, "listing checkpoints")
	}
	if len(list.Checkpoints) == 0 {
		return text("No checkpoints of thread " + t.sb.thread + " yet. Use checkpoint to make one.")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d checkpoints of thread %s, newest first:", len(list.Checkpoints), t.sb.thread)
	for i, cp := range list.Checkpoints {
		fmt.Fprintf(&b, "\n%d. %s %s%s: %d files, %d bytes", i+1, cp.ID, cp.CreatedAt.UTC().Format(time.RFC3339), labelled(cp.Label), cp.Files, cp.Size)
	}
	return text(b.String())
}

func (t tools) restoreCheckpoint(ctx context.Context, _ *sdk.CallToolRequest, in restoreCheckpointIn) (*sdk.CallToolResult, any, error) {
	if in.ID == "" {
		return fail("Error: id is required (list_checkpoints shows the ids)")
	}
	var out api.Restored
	err := t.sb.control(ctx, longTimeout, http.MethodPost, "/checkpoints/"+url.PathEscape(in.ID)+"/restore",
		api.RestoreCheckpoint{Force: in.Force}, &out)
	switch code(err) {
	case "sandbox_busy":
		return fail("Error: a command is still running in the sandbox (or a request to it is in flight), so nothing was restored. " +
			"Wait for it to finish, or call restore_checkpoint again with force=true to restore under it.")
	case "checkpoint_not_found":
		return fail("Error: this thread has no checkpoint %s (list_checkpoints shows the ids)", in.ID)
	}
	if err != nil {
		return controlFailed(err, "restoring the checkpoint")
	}
	cp := out.Restored
	return text(fmt.Sprintf("Restored checkpoint %s%s, made %s: the files under %s are as they were then; every change since is undone.",
		cp.ID, labelled(cp.Label), cp.CreatedAt.UTC().Format(time.RFC3339), userData))
}

func (t tools) forkThread(ctx context.Context, _ *sdk.CallToolRequest, in forkThreadIn) (*sdk.CallToolResult, any, error) {
	if in.Thread == "" {
		return fail("Error: thread is required: the new thread's id")
	}
	var view api.Sandbox
	err := t.sb.control(ctx, longTimeout, http.MethodPost, "/fork", api.Fork{Thread: in.Thread, Checkpoint: in.Checkpoint}, &view)
	switch c := code(err); {
	case c == "thread_exists":
		return fail("Error: thread %s already exists (it has a sandbox or files); fork onto a new thread id", in.Thread)
	case c == "checkpoint_not_found" && in.Checkpoint != "":
		return fail("Error: this thread has no checkpoint %s (list_checkpoints shows the ids)", in.Checkpoint)
	case c == "checkpoint_not_found" || c == "not_found":
		return fail("Error: this thread has no files yet, so there is nothing to fork")
	}
	if err != nil {
		return controlFailed(err, "forking the thread")
	}
	from := "its current files"
	if in.Checkpoint != "" {
		from = "checkpoint " + in.Checkpoint
	}
	return text(fmt.Sprintf("Forked thread %s (%s) into thread %s: sandbox %s, %s. The two threads are independent from now on; "+
		"this server keeps working on %s, and %s is served at /threads/%s/mcp.",
		t.sb.thread, from, in.Thread, view.SandboxID, view.State, t.sb.thread, in.Thread, in.Thread))
}

func labelled(label string) string {
	if label == "" {
		return ""
	}
	return fmt.Sprintf(" (%q)", label)
}

// code is the gateway's error code of a failed control call, "" for none.
func code(err error) string {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.code
	}
	return ""
}

// controlFailed is the tool error of a control call the tool has no
// better words for: the gateway's message and code.
func controlFailed(err error, doing string) (*sdk.CallToolResult, any, error) {
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.code == "not_supported":
		return fail("Error: checkpoints and forks are not available on this gateway (its sandbox backend keeps thread files where the gateway cannot copy them)")
	case errors.As(err, &ae):
		return fail("Error: %s failed: %s (%s)", doing, ae.message, ae.code)
	}
	return fail("Error: Unexpected error %s: %s", doing, err)
}
