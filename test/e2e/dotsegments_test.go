package e2e

import (
	"os"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/identity"
)

// TestDotSegmentsRefusedOnCapabilityAndSandboxURLs is
// TestRemoteBackendDotSegmentsNeverLeave's attack entered through the other
// two proxied route families of the outer gateway: alice's capability URL
// (/c/{capability}/v1/..., no credential) and her sandbox by id
// (/sandboxes/{id}/v1/..., her key). Below either, the upstream is her
// sandbox URL on the inner gateway behind a normalising nginx, so a dot
// segment let through lands in bob's sandbox with the provisioner's admin
// key. Every form is a JSON 400 and none reaches nginx.
func TestDotSegmentsRefusedOnCapabilityAndSandboxURLs(t *testing.T) {
	t.Parallel()
	og, nginxURL, accessLog := remoteBehindNginx(t)
	alice := provision(t, og, "alice-key", "alice", "x")
	capURL, ok := strings.CutPrefix(alice.URL, og.URL)
	if !ok || !strings.HasPrefix(capURL, "/c/") {
		t.Fatalf("alice's sandbox_url %q is not a capability URL of the outer gateway", alice.URL)
	}
	bob := identity.SandboxID("bob", "t")
	read := []byte(`{"file": "/mnt/user-data/workspace/secret.txt"}`)
	if code, body := rawRequest(t, og.URL, capURL+"/v1/file/read", []byte(`{"file": "/etc/hostname"}`), ""); code != 200 {
		t.Fatalf("alice's capability URL itself: %d %s", code, body)
	}

	// As in TestRemoteBackendDotSegmentsNeverLeave: the hop the outer
	// gateway must never make does reach bob through nginx.
	setup := "/sandboxes/" + alice.SandboxID + "/v1/../../../sandboxes/" + bob + "/v1/file/read"
	code, body := rawRequest(t, nginxURL, setup, read, "Bearer front-key")
	if code != 200 || !strings.Contains(body, "bob-private-marker") {
		t.Fatalf("setup: nginx does not resolve dot segments into bob's sandbox (%d %s); the attack below proves nothing", code, body)
	}

	for _, entry := range []struct{ prefix, authorization string }{
		{capURL + "/v1/", ""},
		{"/sandboxes/" + alice.SandboxID + "/v1/", "Bearer alice-key"},
	} {
		for _, tail := range dotSegmentTails(bob) {
			path := entry.prefix + tail
			code, body := rawRequest(t, og.URL, path, read, entry.authorization)
			if strings.Contains(body, "bob-private-marker") {
				t.Errorf("%s: alice read bob's file: %d %s", path, code, body)
				continue
			}
			if code != 400 || !strings.Contains(body, `"bad_request"`) {
				t.Errorf("%s: %d %s, want a JSON 400 before anything is sent upstream", path, code, body)
			}
		}
	}
	nothingLeftNginx(t, accessLog, setup)
}

// dotSegmentTails are the dot-segment forms the gateway refuses, each
// climbing from a sandbox's /v1/ to bob's file read: plain, percent-encoded
// in either case, with encoded slashes and backslashes, and doubly encoded.
func dotSegmentTails(bob string) []string {
	return []string{
		"../../sandboxes/" + bob + "/v1/file/read",
		"../../../sandboxes/" + bob + "/v1/file/read",
		"%2e%2e/%2e%2e/%2e%2e/sandboxes/" + bob + "/v1/file/read",
		"./../../sandboxes/" + bob + "/v1/file/read",
		"%2e%2e/%2e%2e/sandboxes/" + bob + "/v1/file/read",
		"%2E%2e/%2e%2E/sandboxes/" + bob + "/v1/file/read",
		"%2E./%2E./%2E./sandboxes/" + bob + "/v1/file/read",
		".%2e/%2e./sandboxes/" + bob + "/v1/file/read",
		"..%2f..%2fsandboxes%2f" + bob + "%2fv1%2ffile%2fread",
		"%2e%2e%2F%2e%2e%2Fsandboxes/" + bob + "/v1/file/read",
		"..%5c..%5csandboxes/" + bob + "/v1/file/read",
		`..\..\sandboxes/` + bob + "/v1/file/read",
		"%252e%252e/%252e%252e/sandboxes/" + bob + "/v1/file/read",
		"..%252f..%252fsandboxes/" + bob + "/v1/file/read",
	}
}

// nothingLeftNginx fails for every request line in nginx's access log that
// holds a dot segment in any encoding, except the test's own setup request.
func nothingLeftNginx(t *testing.T, accessLog, setup string) {
	t.Helper()
	logged, err := os.ReadFile(accessLog)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(logged), "\n") {
		l := strings.ToLower(line)
		if strings.Contains(l, "..") || strings.Contains(l, "%2e") || strings.Contains(l, "%5c") || strings.Contains(l, `\`) {
			if line != "POST "+setup+" HTTP/1.1" {
				t.Errorf("a dot-segment request left the outer gateway: %s", line)
			}
		}
	}
}
