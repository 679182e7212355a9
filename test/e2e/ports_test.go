package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/identity"
)

// TestPorts: a web server a command starts inside a sandbox on
// 127.0.0.1:3000 answers through the gateway, by the path route and the
// host route, on the process backend (isolated: the jail has only lo) and
// the docker backend (network none): only the sandbox server, in the same
// network namespace, can reach it. A port with no listener is a 502 naming
// it within 1 s; another user's credential never opens it.
func TestPorts(t *testing.T) {
	t.Parallel()
	t.Run("process", func(t *testing.T) {
		t.Parallel()
		checkPorts(t, securedFleet(t))
	})
	t.Run("docker", func(t *testing.T) {
		t.Parallel()
		checkPorts(t, securedFleet(t, newDockerEnv(t).args()...))
	})
}

func checkPorts(t *testing.T, g *gateway) {
	const thread = "webapp"
	alice, bob := bearer("alice-key"), bearer("bob-key")
	sid := identity.SandboxID("alice", thread)
	marker := "served from the sandbox of alice " + randomHex(8)

	// busybox httpd daemonises itself, so the command returns while it
	// serves; busybox is in both the docker image and the host's /bin.
	start := "mkdir -p site/sub && printf '%s' '" + marker + "' > site/sub/page.txt && " +
		"busybox httpd -p 127.0.0.1:3000 -h \"$PWD/site\" && echo started"
	if d := shell(t, g.URL, thread, start, alice...); d.ExitCode == nil || *d.ExitCode != 0 || !strings.Contains(d.Output, "started") {
		t.Fatalf("start the server: %+v", d)
	}

	routes := []struct{ name, path, host string }{
		{"path route", "/threads/" + thread + "/ports/3000/sub/page.txt?x=1", ""},
		{"host route", "/sub/page.txt?x=1", "3000-" + sid + "." + hostSuffix},
	}
	for _, rt := range routes {
		var code int
		var body []byte
		// The first request may race the daemon's bind: a few tries.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			code, body, _ = req{"GET", rt.path, rt.host, nil, alice}.do(t, g)
			if code == 200 || time.Now().After(deadline) {
				break
			}
		}
		if code != 200 || string(body) != marker {
			t.Errorf("%s: %d %s, want the app's %q", rt.name, code, body, marker)
		}
	}

	// Nothing listens on 3001: a 502 naming it, at once.
	for _, rt := range []struct{ name, path, host string }{
		{"path route", "/threads/" + thread + "/ports/3001/", ""},
		{"host route", "/", "3001-" + sid + "." + hostSuffix},
	} {
		began := time.Now()
		code, body, _ := req{"GET", rt.path, rt.host, nil, alice}.do(t, g)
		took := time.Since(began)
		var env envelope
		_ = json.Unmarshal(body, &env)
		if code != 502 || env.Message != "nothing listens on port 3001 in the sandbox" || took > time.Second {
			t.Errorf("%s to 3001: %d %s after %s, want 502 naming 3001 within 1s", rt.name, code, body, took)
		}
	}

	// Bad ports are refused before any I/O.
	if code, body, _ := (req{"GET", "/threads/" + thread + "/ports/65536/", "", nil, alice}).do(t, g); code != 400 {
		t.Errorf("port 65536: %d %s, want 400", code, body)
	}

	// Bob: alice's sandbox by host is as unknown as a missing one; his
	// thread of the same name is his own sandbox, where nothing listens.
	if code, body, _ := (req{"GET", "/sub/page.txt", "3000-" + sid + "." + hostSuffix, nil, bob}).do(t, g); code != 404 || strings.Contains(string(body), marker) {
		t.Errorf("bob by alice's host: %d %s, want 404", code, body)
	}
	if code, body, _ := (req{"GET", "/threads/" + thread + "/ports/3000/sub/page.txt", "", nil, bob}).do(t, g); code == 200 || strings.Contains(string(body), marker) {
		t.Errorf("bob's own thread reached alice's server: %d %s", code, body)
	}
	// No credential at all.
	for _, rt := range routes {
		if code, body, _ := (req{"GET", rt.path, rt.host, nil, nil}).do(t, g); code != 401 || strings.Contains(string(body), marker) {
			t.Errorf("%s without a credential: %d %s, want 401", rt.name, code, body)
		}
	}
}
