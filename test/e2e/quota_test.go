package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

type dataView struct {
	Bytes       int64     `json:"bytes"`
	Quota       *int64    `json:"quota"`
	OverQuota   bool      `json:"over_quota"`
	Approximate bool      `json:"approximate"`
	MeasuredAt  time.Time `json:"measured_at"`
}

// threadData is the data usage GET /threads/{thread}/sandbox reports.
func threadData(t *testing.T, base, thread string) (dataView, string) {
	t.Helper()
	code, body, _ := call(t, "GET", base+"/threads/"+thread+"/sandbox", nil)
	var v struct {
		SandboxURL string    `json:"sandbox_url"`
		Data       *dataView `json:"data"`
	}
	if code != 200 || json.Unmarshal(body, &v) != nil || v.Data == nil {
		t.Fatalf("GET sandbox of %s: %d %s: want a data usage", thread, code, body)
	}
	return *v.Data, v.SandboxURL
}

// A thread's data is measured and reported by GET /threads/{t}/sandbox;
// once measured over thread_data_quota, the file API's writes are refused
// with 507 on every route to the sandbox, reads and shell still work, and
// other threads are untouched.
func TestThreadDataQuota(t *testing.T) {
	t.Parallel()
	const quota = 1 << 20
	f := newFleet(t, "--thread-data-quota", "1m")
	g := f.start()
	write := func(url string) (int, []byte) {
		code, body, _ := call(t, "POST", url+"/v1/file/write", map[string]any{"file": "/mnt/user-data/workspace/note.txt", "content": "hello"})
		return code, body
	}
	// Shell writes are not checked (the quota is a soft limit): 3 MiB.
	if d := shell(t, g.URL, "full", "head -c 3145728 /dev/urandom > /mnt/user-data/outputs/big.bin && echo hi > /mnt/user-data/workspace/r.txt && echo ok"); strings.TrimSpace(d.Output) != "ok" {
		t.Fatalf("shell write: %+v", d)
	}
	before := time.Now().Add(-time.Second)
	data, capURL := threadData(t, g.URL, "full")
	if data.Bytes < 3<<20 || data.Quota == nil || *data.Quota != quota || !data.OverQuota || data.Approximate ||
		data.MeasuredAt.Before(before) {
		t.Fatalf("data of a 3 MiB thread under a 1 MiB quota: %+v", data)
	}
	for _, url := range []string{g.URL + "/threads/full", capURL} {
		code, body := write(url)
		if code != 507 || errorCode(t, body) != "quota_exceeded" || !strings.Contains(string(body), "quota of 1048576 bytes") {
			t.Fatalf("file write over quota via %s: %d %s", url, code, body)
		}
	}
	code, body, _ := call(t, "POST", g.URL+"/threads/full/v1/file/read", map[string]any{"file": "/mnt/user-data/workspace/r.txt"})
	if code != 200 || !strings.Contains(string(body), "hi") {
		t.Fatalf("read over quota: %d %s", code, body)
	}
	if d := shell(t, g.URL, "full", "ls /mnt/user-data/outputs"); !strings.Contains(d.Output, "big.bin") {
		t.Fatalf("shell over quota: %+v", d)
	}

	// Another thread: writes pass, its usage is its own.
	if code, body := write(g.URL + "/threads/light"); code != 200 {
		t.Fatalf("file write under quota: %d %s", code, body)
	}
	if data, _ := threadData(t, g.URL, "light"); data.OverQuota || data.Bytes >= quota {
		t.Fatalf("data of a light thread: %+v", data)
	}
}
