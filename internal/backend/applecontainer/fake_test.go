package applecontainer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// The stand-in `container` CLI: this test binary, run through a symlink
// named `container`, behaves like Apple's CLI as far as the backend uses it
// (run, list, stop, delete, --version, run --help). It records every
// command line in calls.jsonl next to the symlink, keeps one state file per
// container there, and "runs" a container by starting the real sandbox
// server on its own loopback address (127.x.y.z stands in for the VM's IP).

func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "container" {
		// Run by name from PATH, argv[0] has no directory: find the symlink.
		self := os.Args[0]
		if p, err := exec.LookPath(self); err == nil {
			self = p
		}
		os.Exit(fakeMain(filepath.Dir(self), os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeSettings is fake.json next to the symlink.
type fakeSettings struct {
	Server string `json:"server"` // the binary standing in for the image's sandboxspec.ServerImagePath
	Old    bool   `json:"old"`    // a CLI without --cap-drop and --init
}

// fakeContainer is one state file, {dir}/containers/{name}.json.
type fakeContainer struct {
	ID      string            `json:"id"`
	Labels  map[string]string `json:"labels"`
	IP      string            `json:"ip"`
	PID     int               `json:"pid"`
	Remove  bool              `json:"rm"`
	Env     []string          `json:"env"`
	EnvMode os.FileMode       `json:"env_mode"`
}

// newFakeCLI installs the stand-in in a fresh dir and returns its path.
func newFakeCLI(t *testing.T, settings fakeSettings) string {
	t.Helper()
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "container")
	if err := os.Symlink(exe, bin); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(settings)
	if err := os.WriteFile(filepath.Join(dir, "fake.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "containers"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // no server outlives its test
		for _, c := range fakeStates(dir) {
			_ = syscall.Kill(-c.PID, syscall.SIGKILL)
		}
	})
	return bin
}

// fakeCalls returns the recorded command lines.
func fakeCalls(t *testing.T, bin string) [][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(filepath.Dir(bin), "calls.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var calls [][]string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var args []string
		if err := json.Unmarshal(sc.Bytes(), &args); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, args)
	}
	return calls
}

func fakeMain(dir string, args []string) int {
	line, _ := json.Marshal(args)
	if f, err := os.OpenFile(filepath.Join(dir, "calls.jsonl"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err == nil {
		_, _ = f.Write(append(line, '\n'))
		_ = f.Close()
	}
	var settings fakeSettings
	if data, err := os.ReadFile(filepath.Join(dir, "fake.json")); err == nil {
		_ = json.Unmarshal(data, &settings)
	}
	if len(args) == 0 {
		return fail("Error: missing subcommand")
	}
	switch args[0] {
	case "--version":
		fmt.Println("container CLI version 0.6.0 (stand-in)")
		return 0
	case "run":
		if len(args) == 2 && args[1] == "--help" {
			fmt.Println("USAGE: container run [<options>] <image> [<arguments> ...]\n  --name <name>\n  -l, --label <label>\n  --mount <mount>\n  --env-file <env-file>")
			if !settings.Old {
				fmt.Println("  --cap-add <cap>\n  --cap-drop <cap>\n  --init")
			}
			return 0
		}
		return fakeRun(dir, settings, args[1:])
	case "list", "ls":
		return fakeList(dir, args[1:])
	case "stop":
		return fakeStop(dir, args[1:])
	case "delete", "rm":
		return fakeDelete(dir, args[1:])
	}
	return fail("Error: unknown subcommand " + args[0])
}

func fail(msg string) int {
	fmt.Fprintln(os.Stderr, msg)
	return 1
}

func fakeRun(dir string, settings fakeSettings, args []string) int {
	c := fakeContainer{Labels: map[string]string{}}
	var entrypoint, envPath string
	var mounts []string
	valued := map[string]bool{"--name": true, "--label": true, "--env-file": true, "--mount": true, "--user": true,
		"--cpus": true, "--memory": true, "--cap-add": true, "--cap-drop": true, "--entrypoint": true}
	i := 0
	for ; i < len(args) && strings.HasPrefix(args[i], "-"); i++ {
		flag := args[i]
		switch {
		case flag == "--detach" || flag == "--init":
		case flag == "--rm":
			c.Remove = true
		case valued[flag] && i+1 < len(args):
			i++
			switch v := args[i]; flag {
			case "--name":
				c.ID = v
			case "--label":
				k, val, _ := strings.Cut(v, "=")
				c.Labels[k] = val
			case "--env-file":
				envPath = v
			case "--entrypoint":
				entrypoint = v
			case "--mount":
				mounts = append(mounts, v)
			}
		default:
			return fail("Error: Unknown option '" + flag + "'")
		}
	}
	if i >= len(args) || c.ID == "" {
		return fail("Error: missing image or --name")
	}
	cmdArgs := args[i+1:]
	// The real CLI refuses a taken name atomically: one run at a time.
	lock, err := os.OpenFile(filepath.Join(dir, "run.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil || syscall.Flock(int(lock.Fd()), syscall.LOCK_EX) != nil {
		return fail(fmt.Sprint("Error: lock: ", err))
	}
	defer lock.Close()
	if _, err := os.Stat(statePath(dir, c.ID)); err == nil {
		return fail(`Error: container with id "` + c.ID + `" already exists`)
	}
	if envPath != "" {
		fi, err := os.Stat(envPath)
		data, rerr := os.ReadFile(envPath)
		if err != nil || rerr != nil {
			return fail("Error: env file: " + fmt.Sprint(err, rerr))
		}
		c.EnvMode = fi.Mode().Perm()
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if l != "" && !strings.HasPrefix(l, "#") {
				c.Env = append(c.Env, l)
			}
		}
	}
	if entrypoint != sandboxspec.ServerImagePath {
		return fail("Error: stand-in runs only " + sandboxspec.ServerImagePath + ", not " + entrypoint)
	}
	c.IP = fmt.Sprintf("127.%d.%d.%d", rand.IntN(200)+20, rand.IntN(250)+1, rand.IntN(250)+2)
	for j, a := range cmdArgs {
		if rest, ok := strings.CutPrefix(a, "0.0.0.0:"); ok && j > 0 && cmdArgs[j-1] == "--listen" {
			cmdArgs[j] = c.IP + ":" + rest
		}
	}
	// The VM's bind mounts are the server's path mappings here.
	for _, m := range mounts {
		opts := map[string]string{}
		for _, kv := range strings.Split(m, ",") {
			k, v, _ := strings.Cut(kv, "=")
			opts[k] = v
		}
		flag := "--map"
		if _, ro := opts["readonly"]; ro {
			flag = "--map-ro"
		}
		cmdArgs = append(cmdArgs, flag, opts["target"]+"="+opts["source"])
	}
	logf, err := os.Create(filepath.Join(dir, c.ID+".log"))
	if err != nil {
		return fail(err.Error())
	}
	defer logf.Close()
	cmd := exec.Command(settings.Server, cmdArgs...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, c.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fail(err.Error())
	}
	c.PID = cmd.Process.Pid
	data, _ := json.Marshal(c)
	if err := os.WriteFile(statePath(dir, c.ID), data, 0o644); err != nil {
		return fail(err.Error())
	}
	fmt.Println(c.ID)
	return 0
}

func statePath(dir, id string) string { return filepath.Join(dir, "containers", id+".json") }

func fakeStates(dir string) []fakeContainer {
	files, _ := filepath.Glob(filepath.Join(dir, "containers", "*.json"))
	var out []fakeContainer
	for _, f := range files {
		var c fakeContainer
		if data, err := os.ReadFile(f); err == nil && json.Unmarshal(data, &c) == nil {
			out = append(out, c)
		}
	}
	return out
}

// fakeAlive: the process exists and is not a zombie (nothing may reap the
// server once the stand-in that started it has exited).
func fakeAlive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	end := strings.LastIndexByte(s, ')')
	return end > 0 && end+2 < len(s) && s[end+2] != 'Z'
}

func fakeList(dir string, args []string) int {
	all, quiet := false, false
	for _, a := range args {
		all = all || a == "--all" || a == "-a"
		quiet = quiet || a == "--quiet" || a == "-q"
	}
	type network struct {
		Network string `json:"network"`
		Address string `json:"address"`
	}
	type snap struct {
		Configuration struct {
			ID     string            `json:"id"`
			Labels map[string]string `json:"labels"`
		} `json:"configuration"`
		Status   string    `json:"status"`
		Networks []network `json:"networks"`
	}
	out := []snap{}
	for _, c := range fakeStates(dir) {
		status := "running"
		if !fakeAlive(c.PID) {
			status = "stopped"
			if c.Remove { // --rm: gone once stopped
				_ = os.Remove(statePath(dir, c.ID))
				continue
			}
		}
		if status != "running" && !all {
			continue
		}
		var s snap
		s.Configuration.ID, s.Configuration.Labels, s.Status = c.ID, c.Labels, status
		if status == "running" {
			s.Networks = []network{{Network: "default", Address: c.IP + "/24"}}
		}
		out = append(out, s)
	}
	if quiet {
		for _, s := range out {
			fmt.Println(s.Configuration.ID)
		}
		return 0
	}
	data, _ := json.Marshal(out)
	fmt.Println(string(data))
	return 0
}

func fakeStop(dir string, args []string) int {
	grace := 5 * time.Second
	var name string
	for i := 0; i < len(args); i++ {
		if args[i] == "--time" && i+1 < len(args) {
			n, _ := strconv.Atoi(args[i+1])
			grace, i = time.Duration(n)*time.Second, i+1
		} else {
			name = args[i]
		}
	}
	c, ok := fakeState(dir, name)
	if !ok {
		return fail(`Error: container "` + name + `" not found`)
	}
	_ = syscall.Kill(-c.PID, syscall.SIGTERM)
	for deadline := time.Now().Add(grace); fakeAlive(c.PID) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	_ = syscall.Kill(-c.PID, syscall.SIGKILL)
	if c.Remove {
		_ = os.Remove(statePath(dir, name))
	}
	return 0
}

func fakeDelete(dir string, args []string) int {
	name := args[len(args)-1]
	c, ok := fakeState(dir, name)
	if !ok {
		return fail(`Error: container "` + name + `" not found`)
	}
	_ = syscall.Kill(-c.PID, syscall.SIGKILL)
	_ = os.Remove(statePath(dir, name))
	return 0
}

func fakeState(dir, name string) (fakeContainer, bool) {
	var c fakeContainer
	data, err := os.ReadFile(statePath(dir, name))
	return c, err == nil && json.Unmarshal(data, &c) == nil
}
