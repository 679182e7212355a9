package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHelpListsEveryCommand: `gateway help` names every command of the
// table with a line of its own (issue 40, point 7: -h listed none).
func TestHelpListsEveryCommand(t *testing.T) {
	t.Parallel()
	code, out, stderr := run(t, nil, "", false, "help")
	if code != 0 {
		t.Fatalf("help: exit %d %s", code, stderr)
	}
	for _, name := range []string{"serve", "sandboxes", "threads", "exec", "shell", "checkpoint", "fork", "freeze", "templates",
		"prune", "version", "completion", "help"} {
		if !regexp.MustCompile(`(?m)^  ` + name + ` +\S.{10,}$`).MatchString(out) {
			t.Errorf("help has no line for %s:\n%s", name, out)
		}
	}
	// help COMMAND is the command's usage.
	if code, _, stderr := run(t, nil, "", false, "help", "checkpoint", "create"); code != 0 ||
		!strings.Contains(stderr, "Usage: gateway checkpoint create THREAD") {
		t.Errorf("help checkpoint create: %d %q", code, stderr)
	}
}

// TestDidYouMean: a typo names the closest command and the help of the
// level above it, never `gateway sandboxes lst -h`.
func TestDidYouMean(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
		hint string
	}{
		{[]string{"sandboxes", "lst"}, "\tgateway sandboxes ls\n", "Run 'gateway sandboxes -h' for usage."},
		{[]string{"sandboxes", "isnpect", "x"}, "\tgateway sandboxes inspect\n", "Run 'gateway sandboxes -h' for usage."},
		{[]string{"sandboxs", "ls"}, "\tgateway sandboxes\n", "Run 'gateway -h' for usage."},
		{[]string{"chekpoint", "ls"}, "\tgateway checkpoint\n", "Run 'gateway -h' for usage."},
		{[]string{"checkpoint", "craete", "t"}, "\tgateway checkpoint create\n", "Run 'gateway checkpoint -h' for usage."},
		{[]string{"frezee", "t"}, "\tgateway freeze\n", "Run 'gateway -h' for usage."},
		{[]string{"completoin", "bash"}, "\tgateway completion\n", "Run 'gateway -h' for usage."},
	} {
		code, _, stderr := run(t, nil, "", false, tc.args...)
		// The hint is the level above's help, not `... lst -h`.
		if code != ExitUsage || !strings.Contains(stderr, "Did you mean this?\n"+tc.want) || !strings.HasSuffix(stderr, "\n"+tc.hint+"\n") {
			t.Errorf("%v: exit %d, stderr %q; want a suggestion %q and %q", tc.args, code, stderr, tc.want, tc.hint)
		}
	}
	// Nothing close: no suggestion.
	if _, _, stderr := run(t, nil, "", false, "sandboxes", "zzzzzz"); strings.Contains(stderr, "Did you mean") {
		t.Errorf("suggested for zzzzzz: %q", stderr)
	}
	for _, c := range []struct {
		a, b string
		d    int
	}{{"ls", "lst", 1}, {"inspect", "isnpect", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}} {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

// TestThreadCommandsAskForTheUsersCredential: fork, freeze, checkpoint,
// exec and shell take any credential of the thread's user; their -h must
// not say an admin credential is needed (issue 40, point 7).
func TestThreadCommandsAskForTheUsersCredential(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"fork"}, {"freeze"}, {"checkpoint", "create"}, {"checkpoint", "ls"}, {"checkpoint", "restore"},
		{"checkpoint", "rm"}, {"exec"}, {"shell"}, {"threads", "create"}, {"templates"}} {
		code, _, stderr := run(t, nil, "", false, append(args, "-h")...)
		if code != 0 || strings.Contains(stderr, "admin credential") || !strings.Contains(stderr, "a credential of the thread's user") {
			t.Errorf("%v -h: exit %d, %q", args, code, stderr)
		}
	}
	if _, _, stderr := run(t, nil, "", false, "sandboxes", "ls", "-h"); !strings.Contains(stderr, "admin credential") {
		t.Errorf("sandboxes ls -h does not ask for an admin credential: %q", stderr)
	}
}

// TestBashCompletionLoads sources the script in a real bash and asks it
// to complete, as the shell does on Tab.
func TestBashCompletionLoads(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash is not installed: ", err) // Debian's base has it; no skip
	}
	code, script, stderr := run(t, nil, "", false, "completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: %d %s", code, stderr)
	}
	file := filepath.Join(t.TempDir(), "gateway.bash")
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bash, "-n", file).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v %s", err, out)
	}
	complete := func(words ...string) string {
		t.Helper()
		prog := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _gateway; echo "${COMPREPLY[*]}"`
		out, err := exec.Command(bash, append([]string{"-c", prog, "bash", file}, words...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("complete %v: %v %s", words, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"gateway", ""}, "serve sandboxes threads exec shell checkpoint preview fork freeze templates prune version completion help"},
		{[]string{"gateway", "sa"}, "sandboxes"},
		{[]string{"gateway", "sandboxes", "l"}, "ls logs"},
		{[]string{"gateway", "sb", "in"}, "inspect"},
		{[]string{"gateway", "checkpoint", "r"}, "restore rm"},
		{[]string{"gateway", "completion", ""}, "bash zsh fish"},
		{[]string{"gateway", "freeze", "--to"}, "--token"},
	} {
		if got := complete(tc.words...); got != tc.want {
			t.Errorf("complete %q: %q, want %q", tc.words, got, tc.want)
		}
	}
}

// TestZshAndFishCompletion: zsh gets the bash function through
// bashcompinit (so the bash test covers its logic); fish gets a line per
// command and subcommand. Neither shell is installed on the test machine,
// so their scripts are checked for what they must hold.
func TestZshAndFishCompletion(t *testing.T) {
	t.Parallel()
	_, zsh, _ := run(t, nil, "", false, "completion", "zsh")
	_, bash, _ := run(t, nil, "", false, "completion", "bash")
	if !strings.Contains(zsh, "bashcompinit") || !strings.HasSuffix(zsh, bash[strings.Index(bash, "_gateway() {"):]) {
		t.Errorf("zsh script is not bashcompinit plus the bash function:\n%s", zsh)
	}
	code, fish, _ := run(t, nil, "", false, "completion", "fish")
	if code != 0 {
		t.Fatalf("completion fish: %d", code)
	}
	line := regexp.MustCompile(`^complete -c gateway( -[a-z]( '[^'\\]*(\\.[^'\\]*)*'| [a-z-]+)?)*$`)
	for _, l := range strings.Split(strings.TrimSpace(fish), "\n") {
		if !strings.HasPrefix(l, "#") && !line.MatchString(l) {
			t.Errorf("fish line does not parse: %q", l)
		}
	}
	for _, c := range commandTable() {
		if !strings.Contains(fish, "-a "+c.name+" -d '") {
			t.Errorf("fish names no %s", c.name)
		}
		for _, s := range c.subs {
			if !strings.Contains(fish, "__fish_seen_subcommand_from "+c.name+"; and not __fish_seen_subcommand_from "+s.name+"' -a "+s.name) {
				t.Errorf("fish names no %s %s", c.name, s.name)
			}
		}
	}
	if code, _, stderr := run(t, nil, "", false, "completion", "tcsh"); code != ExitUsage || !strings.Contains(stderr, "not bash, zsh or fish") {
		t.Errorf("completion tcsh: %d %q", code, stderr)
	}
}

// The table has no word twice, and none the gateway binary keeps for
// itself (serve, the sandbox server).
func TestCommandWordsAreUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{"serve": true, "sandbox": true}
	for _, c := range commandTable() {
		for _, w := range append([]string{c.name}, c.aliases...) {
			if seen[w] {
				t.Errorf("%q twice, or a word the binary keeps", w)
			}
			seen[w] = true
		}
	}
	if IsCommand("sandbox") || IsCommand("serve") {
		t.Error("IsCommand takes a word of the binary's own")
	}
}
