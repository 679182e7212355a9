package sandbox

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestEveryPostRefusesBrowserForms attacks every POST route the server
// registers (walked from Routes, so a new endpoint is covered without
// editing a list) the way a page on another site can: a form-encodable
// body (text/plain, no preflight) and a cross-site fetch. Either must be
// refused before the handler runs: nothing is created or executed.
func TestEveryPostRefusesBrowserForms(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	var posts []string
	for _, pattern := range ts.srv.Routes() {
		if p, ok := strings.CutPrefix(pattern, "POST "); ok {
			posts = append(posts, regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(p, "victim"))
		}
	}
	if len(posts) < 20 {
		t.Fatalf("Routes lists only %d POST routes", len(posts))
	}
	body := `{"command":"touch /mnt/user-data/workspace/pwned","id":"victim","session_id":"victim","file":"/mnt/user-data/workspace/pwned","content":"x","path":"/mnt/user-data/workspace/pwned","language":"python","code":"open('pwned','w')","file_text":"x","input":"x","press_enter":true}`
	for _, p := range posts {
		r := ts.send(t, http.MethodPost, p, http.Header{"Content-Type": {"text/plain"}}, strings.NewReader(body))
		if r.Status != http.StatusUnsupportedMediaType {
			t.Errorf("POST %s with text/plain: %d, want 415: %s", p, r.Status, r.Body)
		}
		r = ts.send(t, http.MethodPost, p, http.Header{"Content-Type": {"application/json"}, "Sec-Fetch-Site": {"cross-site"}}, strings.NewReader(body))
		if r.Status != http.StatusForbidden {
			t.Errorf("POST %s cross-site: %d, want 403: %s", p, r.Status, r.Body)
		}
	}
	if entries, _ := os.ReadDir(ts.ws); len(entries) != 0 {
		t.Fatalf("a refused request left files: %v", entries)
	}
}
