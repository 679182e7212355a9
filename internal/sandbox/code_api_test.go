package sandbox

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/testutil"
)

// needRuntime skips without bin, except under CI, where it fails.
func needRuntime(t *testing.T, bin string) {
	t.Helper()
	_, err := exec.LookPath(bin)
	testutil.Require(t, err == nil, bin)
}

func TestCodeExecute(t *testing.T) {
	t.Parallel()
	needRuntime(t, "python3")
	needRuntime(t, "node")
	ts := newHostServer(t)
	shellRun(t, ts, map[string]any{"command": "cd /mnt/user-data/outputs && export LEAK=1"})
	for _, tc := range []struct {
		name, lang, code, status, stdout, stderr string
		timeout                                  float64
	}{
		{"python", "python", "import os\nprint(os.getcwd(), os.environ.get('LEAK'))", "ok", vWorkspace + " None\n", "", 0},
		{"python error", "python", "raise ValueError('bad')", "error", "", "ValueError: bad", 0},
		{"javascript", "javascript", "console.log(6*7)", "ok", "42\n", "", 0},
		{"timeout", "python", "import time\ntime.sleep(30)", "timeout", "", "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := map[string]any{"language": tc.lang, "code": tc.code}
			if tc.timeout > 0 {
				body["timeout"] = tc.timeout
			}
			r := okData[codeExecResult](t, ts, "/v1/code/execute", body)
			if r.Status != tc.status || r.Stdout != tc.stdout || !strings.Contains(r.Stderr, tc.stderr) || r.Language != tc.lang {
				t.Fatalf("got %+v", r)
			}
			if strings.Contains(r.Stderr, ts.root) {
				t.Fatalf("a host path leaked: %q", r.Stderr)
			}
		})
	}
	if r := ts.post(t, "/v1/code/execute", map[string]any{"language": "python", "code": "1", "stateful": true}); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("stateful: %d", r.Status)
	}
	var info struct {
		Languages []codeLanguage `json:"languages"`
	}
	if r := ts.do(t, http.MethodGet, "/v1/code/info", nil); json.Unmarshal(r.Data, &info) != nil || len(info.Languages) != 2 ||
		info.Languages[0].RuntimeVersion == nil || !strings.HasPrefix(*info.Languages[0].RuntimeVersion, "Python 3") {
		t.Fatalf("code info: %s", r.Body)
	}
	var pkgs []map[string]any
	if r := ts.do(t, http.MethodGet, "/v1/sandbox/packages/python", nil); json.Unmarshal(r.Data, &pkgs) != nil || len(pkgs) == 0 || pkgs[0]["name"] == nil {
		t.Fatalf("python packages: %.300s", r.Body)
	}
}
