package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/sandgate/sandgate/internal/api"
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
	return deleteEach(ctx, env, cl, c.output, threads,
		func(thread string) string {
			return "/admin/v1/users/" + url.PathEscape(user) + "/threads/" + url.PathEscape(thread)
		},
		func(thread string, out api.ThreadRemoved) string {
			return fmt.Sprintf("%s: sandbox destroyed: %v, data: %s", thread, out.SandboxDestroyed, out.Data)
		})
}
