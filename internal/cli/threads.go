package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

func runThreadsRm(ctx context.Context, env Env, args []string) error {
	var c common
	var user string
	var yes bool
	fs := newFlags(env, "threads rm", "threads rm --user U [-y] THREAD...   (destroys the sandbox and deletes the thread's data)", &c)
	fs.StringVar(&user, "user", "", "the user the threads belong to (required)")
	fs.BoolVar(&yes, "y", false, "do not ask for confirmation (required when stdin is not a terminal)")
	fs.BoolVar(&yes, "yes", false, "same as -y")
	threads, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if user == "" {
		return usagef("threads rm: --user is required (thread ids are per user)")
	}
	if len(threads) == 0 {
		return usagef("threads rm: want at least one thread id")
	}
	if !yes {
		if !env.StdinTTY {
			return usagef("threads rm deletes data: confirm with -y when stdin is not a terminal")
		}
		fmt.Fprintf(env.Stderr, "Delete the sandbox and all data of %d thread(s) of user %s (%s)? [y/N] ",
			len(threads), user, strings.Join(threads, ", "))
		line, _ := bufio.NewReader(env.Stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			return errors.New("not confirmed; nothing deleted")
		}
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	var done []map[string]any
	err = eachID(env, threads, func(thread string) error {
		var out map[string]any
		if err := cl.call(ctx, "DELETE", "/admin/v1/users/"+url.PathEscape(user)+"/threads/"+url.PathEscape(thread), nil, &out); err != nil {
			return err
		}
		done = append(done, out)
		if c.output == "table" {
			fmt.Fprintf(env.Stdout, "%s: sandbox destroyed: %v, data: %v\n", thread, out["sandbox_destroyed"], out["data"])
		}
		return nil
	})
	if c.output == "json" {
		if done == nil {
			done = []map[string]any{}
		}
		return errors.Join(writeJSON(env.Stdout, done), err)
	}
	return err
}
