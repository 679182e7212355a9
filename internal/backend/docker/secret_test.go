package docker

import (
	"archive/tar"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/jail"
)

// TestSecretOnlyForOurServer: with Sandgate's server the secret goes to a
// file flag and the recovery label, never into the environment or the
// command line; a third-party image gets none (the shared key applies).
func TestSecretOnlyForOurServer(t *testing.T) {
	t.Parallel()
	const secret = "docker-secret-0123456789abcdef0123456789"
	spec := backend.Spec{SandboxID: "0123456789abcdef", User: "u", Thread: "t", Secret: secret}
	cfg := Config{Image: "img:1", ContainerPrefix: "sbx"}
	cs, logs := specFor(t, cfg, spec, "/gateway")
	if cs.Secret != secret || cs.Config.Labels[labelSecret] != secret ||
		!slices.Equal(cs.Config.Cmd[len(cs.Config.Cmd)-2:], []string{"--secret-file", secretPath}) {
		t.Fatalf("our server: secret %v, label %v, cmd %q", cs.Secret == secret, cs.Config.Labels[labelSecret] == secret, cs.Config.Cmd)
	}
	if strings.Contains(strings.Join(cs.Config.Env, " ")+strings.Join(cs.Config.Cmd, " ")+logs, secret) {
		t.Fatal("the secret is in the environment, the command line or the log")
	}
	other, _ := specFor(t, cfg, spec, "")
	if other.Secret != "" || other.Config.Labels[labelSecret] != "" || slices.Contains(other.Config.Cmd, "--secret-file") {
		t.Fatalf("a third-party image got a secret: %+v", other.Config)
	}
	info := withSecret(backend.Info{Labels: cs.Config.Labels})
	if info.Secret != secret || info.Labels[labelSecret] != "" || cs.Config.Labels[labelSecret] != secret {
		t.Fatal("withSecret must move the label into Info.Secret without changing the container's labels")
	}
}

// TestSecretArchive: the file is the user's alone (0400 in a 0700 dir);
// a user known only by name gets modes the server can read and delete with.
func TestSecretArchive(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name             string
		known            bool
		uid              int
		dirMode, fileMod int64
		wantUID          int
	}{
		{"numeric user", true, 1000, 0o700, 0o400, 1000},
		{"named user", false, 1000, 0o777, 0o444, 0},
	} {
		buf, err := secretArchive("s3cret", c.uid, c.uid, c.known)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(buf)
		dir, err1 := tr.Next()
		file, err2 := tr.Next()
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v %v", c.name, err1, err2)
		}
		content, _ := io.ReadAll(tr)
		if dir.Name != ".sandgate/" || dir.Mode != c.dirMode || dir.Uid != c.wantUID ||
			file.Name != ".sandgate/secret" || file.Mode != c.fileMod || file.Uid != c.wantUID || string(content) != "s3cret" {
			t.Fatalf("%s: dir %s %o uid %d, file %s %o uid %d, content %q", c.name, dir.Name, dir.Mode, dir.Uid,
				file.Name, file.Mode, file.Uid, content)
		}
	}
}

// TestSecretOwner: the file's owner is the sandbox's user when it is
// numeric; a name is left to the image (world modes, see secretArchive).
func TestSecretOwner(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		user     string
		uid, gid int
		known    bool
	}{
		{"", jail.SandboxHostID("0123456789abcdef"), jail.SandboxHostID("0123456789abcdef"), true},
		{"1000:2000", 1000, 2000, true}, {"1000", 1000, 0, true}, {"0:0", 0, 0, true},
		{"sandbox", 0, 0, false}, {"1000:staff", 0, 0, false}, {"-1:0", 0, 0, false},
	} {
		d := newWithEngine(Config{Image: "img:1", ContainerPrefix: "sbx", User: c.user}, nil, nil)
		uid, gid, known, err := d.secretOwner(t.Context(), "img:1", resolveUser(c.user, "0123456789abcdef", 0, 0))
		if err != nil || known != c.known || known && (uid != c.uid || gid != c.gid) {
			t.Errorf("user %q: %d:%d known=%v err=%v", c.user, uid, gid, known, err)
		}
	}
}
