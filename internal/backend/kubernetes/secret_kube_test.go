package kubernetes

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/internal/backend/backendtest"
)

// TestPodSecretStaysWithTheServer attacks the per-Pod secret on the real
// node: from the API (the Pod object, kubectl describe), from inside the
// sandbox (every file its commands can read, every process's environment
// and command line, the server's memory), and with another Pod's secret.
func TestPodSecretStaysWithTheServer(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t)
	k := e.backend(t, e.config())
	a := backendtest.MustCreate(t, k, spec("mallory", "a"))
	b := backendtest.MustCreate(t, k, spec("victim", "b"))
	if a.Secret == "" || b.Secret == "" || a.Secret == b.Secret {
		t.Fatalf("secrets %q and %q: want two of their own", a.Secret, b.Secret)
	}

	pod, _ := e.pod(t, podName(a.SandboxID))
	podJSON, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(podJSON), a.Secret) {
		t.Error("the Pod object holds its secret")
	}
	if out := e.api.Kubectl(t, "describe", "pod", "-n", e.ns, pod.Name); strings.Contains(out, a.Secret) || !strings.Contains(out, pod.Name) {
		t.Errorf("kubectl describe shows the secret (or not the Pod):\n%s", out)
	}

	// The secret is assembled in the shell, so that no command line holds
	// it whole; a planted copy proves the search reaches readable files.
	half := len(a.Secret) / 2
	script := `s='` + a.Secret[:half] + `''` + a.Secret[half:] + `'
printf %s "$s" > /tmp/planted
find / \( -path /proc -o -path /sys \) -prune -o -type f -print 2>/dev/null | while read -r f; do grep -qsF "$s" "$f" && echo "$f"; done
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do grep -qsF "$s" "$f" && echo "$f"; done
cat /proc/1/environ >/dev/null 2>&1 && echo "/proc/1/environ readable"
head -c1 /proc/1/mem >/dev/null 2>&1 && echo "/proc/1/mem readable"
ls /var/run/sandgate-secret /run/sandgate/secret 2>/dev/null
true`
	if out := strings.TrimSpace(backendtest.Exec(t, a, script).Output); out != "/tmp/planted" {
		t.Errorf("the sandbox's commands found its secret (or not the planted copy):\n%s", out)
	}

	// One Pod's secret opens no other Pod.
	if got := backendtest.Status(t, b.URL, a.Secret); got != http.StatusUnauthorized {
		t.Errorf("sandbox b with a's secret: %d, want 401", got)
	}
	if got := backendtest.Status(t, b.URL, b.Secret); got != http.StatusOK {
		t.Errorf("sandbox b with its own secret: %d, want 200", got)
	}
	if got := backendtest.Status(t, a.URL, ""); got != http.StatusUnauthorized {
		t.Errorf("sandbox a without a secret: %d, want 401", got)
	}
}

// TestCreateAfterThePodWasDeleted: a Pod deleted behind the backend's back
// leaves its Secret to the garbage collector; the next Create replaces it
// and the new Pod answers with its new secret.
func TestCreateAfterThePodWasDeleted(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t)
	k := e.backend(t, e.config())
	s := spec("frank", "t")
	first := backendtest.MustCreate(t, k, s)
	pods := e.api.Admin.CoreV1().Pods(e.ns)
	if err := pods.Delete(t.Context(), podName(s.SandboxID), metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	backendtest.Eventually(t, "Alive notices the deletion", func() bool {
		ok, err := k.Alive(backendtest.Ctx(t), first)
		return err == nil && !ok
	})
	s.Secret = "another-secret-0123456789abcdef0123456789abcdef"
	second := backendtest.MustCreate(t, k, s)
	if second.Incarnation == first.Incarnation || second.Secret != s.Secret {
		t.Fatalf("second incarnation %s secret %q", second.Incarnation, second.Secret)
	}
	if got := backendtest.Status(t, second.URL, second.Secret); got != http.StatusOK {
		t.Errorf("new Pod with its secret: %d", got)
	}
}
