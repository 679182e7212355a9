package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// command is one word of the CLI: a leaf that runs, or a group of
// subcommands. The table below is the one list `gateway help`, the group
// usages, completion and did-you-mean read, so none of them can forget a
// command.
type command struct {
	name    string
	aliases []string
	summary string // one line for `gateway help`
	run     func(ctx context.Context, env Env, args []string) error
	subs    []command
}

func (c command) is(word string) bool {
	if word == c.name {
		return true
	}
	for _, a := range c.aliases {
		if word == a {
			return true
		}
	}
	return false
}

// subNames are a group's subcommand names, comma separated.
func (c command) subNames() string {
	names := make([]string, len(c.subs))
	for i, s := range c.subs {
		names[i] = s.name
	}
	return strings.Join(names, ", ")
}

// commandTable is built on each call: a package-level variable would be an
// initialization cycle (help reads the table it is in).
func commandTable() []command {
	return []command{
		// Not "sandbox": that word starts the sandbox server.
		{name: "sandboxes", aliases: []string{"sb"}, summary: "the fleet's sandboxes: ls, inspect, destroy, logs, top (admin)", subs: []command{
			{name: "ls", aliases: []string{"list"}, summary: "list sandboxes, filtered by user, thread, state or backend", run: runList},
			{name: "inspect", summary: "one sandbox in detail: liveness, thread data", run: runInspect},
			{name: "destroy", aliases: []string{"rm"}, summary: "destroy sandboxes (their threads' data stays)", run: runDestroy},
			{name: "logs", summary: "a sandbox's log: its server's lines, one per command that ended (-f follows)", run: runLogs},
			{name: "top", summary: "CPU, memory, processes, disk and egress bytes per sandbox", run: runTop},
		}},
		{name: "threads", summary: "create a thread's sandbox; delete a user's threads (rm: admin)", subs: []command{
			{name: "create", summary: "create (or reuse) a thread's sandbox from a template", run: runThreadsCreate},
			{name: "rm", aliases: []string{"delete"}, summary: "destroy threads' sandboxes and delete their data (admin)", run: runThreadsRm},
		}},
		{name: "exec", summary: "run a command in a thread's sandbox, streaming its output; exits with its code", run: runExec},
		{name: "shell", summary: "an interactive terminal in a thread's sandbox", run: runShell},
		{name: "checkpoint", aliases: []string{"checkpoints"}, summary: "a thread's workspace snapshots: create, ls, restore, rm", subs: []command{
			{name: "create", summary: "snapshot the thread's workspace", run: runCheckpointCreate},
			{name: "ls", aliases: []string{"list"}, summary: "list the thread's checkpoints, newest first", run: runCheckpointList},
			{name: "restore", summary: "make a checkpoint the thread's workspace", run: runCheckpointRestore},
			{name: "rm", aliases: []string{"delete"}, summary: "delete checkpoints", run: runCheckpointRm},
		}},
		{name: "preview", aliases: []string{"previews"}, summary: "links to a port of a thread's sandbox that need no credential: create, ls, rm", subs: []command{
			{name: "create", summary: "a signed, expiring link to one port of the thread's sandbox", run: runPreviewCreate},
			{name: "ls", aliases: []string{"list"}, summary: "list the thread's live links", run: runPreviewList},
			{name: "rm", aliases: []string{"delete"}, summary: "revoke links (every replica within a second)", run: runPreviewRm},
		}},
		{name: "fork", summary: "a new thread with a copy of a thread's workspace", run: runFork},
		{name: "freeze", summary: "stop a thread's sandbox's processes, memory kept (its next request thaws it)", run: runFreeze},
		{name: "templates", summary: "the templates a thread may be created from", run: runTemplates},
		{name: "prune", summary: "list this fleet's leftovers; --force removes them (admin)", run: runPrune},
		{name: "version", aliases: []string{"--version", "-version"}, summary: "this binary's version and the gateway's", run: runVersion},
		{name: "completion", summary: "a shell completion script: completion bash|zsh|fish", run: runCompletion},
		{name: "help", summary: "this list, or a command's usage: help COMMAND", run: runHelp},
	}
}

// serveSummary is the line of the one command Main does not run.
const serveSummary = "run the gateway (the default without a command; 'gateway serve -h' lists its flags)"

// IsCommand reports whether arg names a CLI command (the gateway's own
// words, serve and the sandbox server, are not).
func IsCommand(arg string) bool {
	for _, c := range commandTable() {
		if c.is(arg) {
			return true
		}
	}
	return false
}

// PrintCommands writes the command list, one line each: `gateway help`,
// and before the server's flags, `gateway -h`.
func PrintCommands(w io.Writer) {
	fmt.Fprintf(w, "Usage: gateway [COMMAND] [ARGS]\n\nCommands:\n")
	fmt.Fprintf(w, "  %-12s %s\n", "serve", serveSummary)
	for _, c := range commandTable() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'gateway help COMMAND' or 'gateway COMMAND -h' for a command's usage.\n"+
		"The commands take --url (default $SANDGATE_URL, else http://127.0.0.1:8080), --token (default\n"+
		"$SANDGATE_TOKEN), --timeout and -o table|json.\n")
}

func runHelp(ctx context.Context, env Env, args []string) error {
	if len(args) == 0 {
		PrintCommands(env.Stdout)
		return nil
	}
	if args[0] == "serve" {
		return usagef("help serve: run 'gateway serve -h' for the server's flags")
	}
	// help X Y is X Y -h: the command's own usage.
	return dispatch(ctx, Env{Args: append(append([]string{}, args...), "-h"), Getenv: env.Getenv, Stdin: env.Stdin,
		Stdout: env.Stdout, Stderr: env.Stderr, StdinTTY: env.StdinTTY, Version: env.Version})
}

func dispatch(ctx context.Context, env Env) error {
	args := env.Args
	if len(args) == 0 {
		return usagef("no command")
	}
	cmds := commandTable()
	for _, c := range cmds {
		if !c.is(args[0]) {
			continue
		}
		if c.subs == nil {
			return c.run(ctx, env, args[1:])
		}
		if err := wantSubcommand(env, args, c.subNames()); err != nil {
			return err
		}
		for _, s := range c.subs {
			if s.is(args[1]) {
				return s.run(ctx, env, args[2:])
			}
		}
		return unknown(c.name+": unknown subcommand", args[1], "gateway "+c.name, c.subs)
	}
	return unknown("unknown command", args[0], "gateway", cmds)
}

// unknown is the usage error of a mistyped word: the closest name when
// one is close, and the help of the level above (not of the typo).
func unknown(what, word, above string, among []command) error {
	msg := fmt.Sprintf("%s %q", what, word)
	if near := closest(word, among); near != "" {
		msg += fmt.Sprintf("\n\nDid you mean this?\n\t%s %s\n", above, near)
	}
	return &usageError{msg: msg, hint: above}
}

// closest is the name among cmds (aliases included) nearest to word, if
// it is a likely typo of it: within two edits, at most a third of it, or
// word is its prefix.
func closest(word string, cmds []command) string {
	best, bestDist := "", 0
	for _, c := range cmds {
		for _, name := range append([]string{c.name}, c.aliases...) {
			if strings.HasPrefix(name, "-") {
				continue
			}
			d := editDistance(word, name)
			if strings.HasPrefix(name, word) && len(word) >= 2 {
				d = 1
			}
			if d > 2 || d*3 > max(len(name), 3) {
				continue
			}
			if best == "" || d < bestDist {
				best, bestDist = c.name, d
			}
		}
	}
	return best
}

// editDistance is the Damerau-Levenshtein distance (optimal string
// alignment): a swap of two neighbours counts one, the commonest typo.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
