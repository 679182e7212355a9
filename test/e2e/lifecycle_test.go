package e2e

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func incarnations(f *fleet) []string {
	var out []string
	for _, s := range f.sandboxes() {
		out = append(out, s.SandboxID+"/"+s.Incarnation)
	}
	sort.Strings(out)
	return out
}

func TestReleaseParksWarmAndReclaims(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	shell(t, g.URL, "parked", "echo x > /mnt/user-data/workspace/x")
	before := incarnations(f)
	if code, body, _ := call(t, "DELETE", g.URL+"/threads/parked/sandbox", nil); code != 204 {
		t.Fatalf("release: %d %s", code, body)
	}
	if v := sandboxOf(t, g.URL, "parked"); v.State != "warm" {
		t.Fatalf("after release: %+v", v)
	}
	code, body, _ := call(t, "PUT", g.URL+"/threads/parked/sandbox", nil)
	var v sandboxView
	_ = json.Unmarshal(body, &v)
	if code != 200 || v.Outcome != "warm" || v.State != "active" {
		t.Fatalf("reclaim: %d %s", code, body)
	}
	if after := incarnations(f); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("reclaim replaced the sandbox: %v -> %v", before, after)
	}
	if code, _, _ := call(t, "DELETE", g.URL+"/threads/parked/sandbox?destroy=true", nil); code != 204 {
		t.Fatalf("destroy: %d", code)
	}
	if n := len(f.sandboxes()); n != 0 {
		t.Fatalf("%d sandboxes after destroy", n)
	}
	if code, body, _ := call(t, "GET", g.URL+"/threads/parked/sandbox", nil); code != 404 || errorCode(t, body) != "not_found" {
		t.Fatalf("GET after destroy: %d %s", code, body)
	}
	if code, _, _ := call(t, "DELETE", g.URL+"/threads/parked/sandbox?destroy=maybe", nil); code != 400 {
		t.Fatalf("bad destroy flag: %d", code)
	}
}

func TestRedisFlushThenTrafficKeepsEverySandbox(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--max-sandboxes", "0")
	a := f.start()
	for _, th := range []string{"r1", "r2", "r3"} {
		shell(t, a.URL, th, "echo "+th+" > /mnt/user-data/workspace/id")
	}
	before := incarnations(f)
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	b := f.start() // no cache: every thread goes through Redis, which has forgotten everything
	for _, th := range []string{"r1", "r2", "r3"} {
		if d := shell(t, b.URL, th, "cat /mnt/user-data/workspace/id"); strings.TrimSpace(d.Output) != th {
			t.Fatalf("%s: %+v", th, d)
		}
	}
	if after := incarnations(f); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("sandboxes changed across FLUSHALL: %v -> %v", before, after)
	}
}
