package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/api"
)

type pruneReport struct {
	Fleet  string `json:"fleet"`
	DryRun bool   `json:"dry_run"`
	Items  []struct {
		Kind      string    `json:"kind"`
		Name      string    `json:"name"`
		SandboxID string    `json:"sandbox_id,omitempty"`
		User      string    `json:"user,omitempty"`
		Thread    string    `json:"thread,omitempty"`
		CreatedAt time.Time `json:"created_at,omitzero"`
		Error     string    `json:"error,omitempty"`
	} `json:"items"`
}

func runPrune(ctx context.Context, env Env, args []string) error {
	var c common
	var force bool
	fs := newFlags(env, "prune", "prune [--force]   (lists this fleet's leftovers; --force removes them)", &c)
	fs.BoolVar(&force, "force", false, "remove what is listed (default: only list it)")
	fs.BoolVar(&force, "f", false, "same as --force")
	fs.BoolVar(&force, "y", false, "same as --force")
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("prune takes no arguments (got %q)", pos[0])
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	method := "GET"
	if force {
		method = "POST"
	}
	var rep api.PruneReport
	if err := cl.call(ctx, method, "/admin/v1/prune", nil, &rep); err != nil {
		return err
	}
	failed := 0
	for _, it := range rep.Items {
		if it.Error != "" {
			failed++
		}
	}
	if c.output == "json" {
		if err := writeJSON(env.Stdout, rep); err != nil {
			return err
		}
	} else {
		t := newTable(env.Stdout, "KIND", "NAME", "SANDBOX ID", "USER", "THREAD", "RESULT")
		for _, it := range rep.Items {
			result := "would remove"
			switch {
			case it.Error != "":
				result = it.Error
			case !rep.DryRun:
				result = "removed"
			}
			t.row(it.Kind, it.Name, it.SandboxID, it.User, it.Thread, result)
		}
		if err := t.flush(); err != nil {
			return err
		}
		if rep.DryRun && len(rep.Items) > 0 {
			fmt.Fprintf(env.Stderr, "Dry run: nothing removed. Run 'gateway prune --force' to remove these leftovers of fleet %q.\n", rep.Fleet)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d leftovers not removed", failed, len(rep.Items))
	}
	return nil
}
