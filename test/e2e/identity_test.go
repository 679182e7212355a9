package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/statedb"
)

// TestColonSubjectCannotTakeAnotherUsersThread: sha256(user:thread) would
// give sub "alice:proj" with thread "1" alice's thread "proj:1". Such a
// subject is refused (401, saying why) before anything is looked up, and
// alice's sandbox stays hers.
func TestColonSubjectCannotTakeAnotherUsersThread(t *testing.T) {
	t.Parallel()
	g := securedFleet(t)
	exp := time.Now().Add(time.Hour).Unix()
	alice := token(t, jwt.MapClaims{"sub": "alice", "exp": exp})
	mallory := token(t, jwt.MapClaims{"sub": "alice:proj", "exp": exp})
	marker := map[string]any{"file": "/mnt/user-data/workspace/owner.txt", "content": "alice"}
	if code, body, _ := (req{"POST", "/threads/proj:1/v1/file/write", "", marker, bearer(alice)}).do(t, g); code != 200 {
		t.Fatalf("alice writes in proj:1: %d %s", code, body)
	}
	read := map[string]any{"file": "/mnt/user-data/workspace/owner.txt"}
	for _, r := range []req{
		{"POST", "/threads/1/v1/file/read", "", read, bearer(mallory)},
		{"DELETE", "/threads/1/sandbox?destroy=true", "", nil, bearer(mallory)},
		{"PUT", "/threads/1/sandbox", "", nil, bearer(mallory)},
		{"POST", "/api/sandboxes", "", map[string]any{"sandbox_id": identity.SandboxID("alice", "proj:1"), "thread_id": "1"}, bearer(mallory)},
		{"GET", "/api/sandboxes/" + identity.SandboxID("alice", "proj:1"), "", nil, bearer(mallory)},
	} {
		code, body, _ := r.do(t, g)
		if code != 401 || errorCode(t, body) != "unauthorized" || !strings.Contains(string(body), "no ':'") {
			t.Errorf("sub alice:proj %s %s: %d %s, want 401 naming the rule", r.method, r.path, code, body)
		}
	}
	if code, body, _ := (req{"POST", "/threads/proj:1/v1/file/read", "", read, bearer(alice)}).do(t, g); code != 200 || !strings.Contains(string(body), `"content":"alice"`) {
		t.Fatalf("alice's proj:1 afterwards: %d %s", code, body)
	}
}

// TestMismatchedRecordIsNeverServed: a record at a caller's derived id that
// names another user (or thread) is refused with 409 identity_conflict on
// every route, logged with its sandbox_id, and its URL never sees a request.
func TestMismatchedRecordIsNeverServed(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "alice="+sha("alice-key"))
	g := f.start()
	var hits atomic.Int32
	decoy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(`{"success":true,"data":{"output":"served from the wrong record"}}`))
	}))
	t.Cleanup(decoy.Close)
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	t.Cleanup(func() { rdb.Close() })

	for _, tc := range []struct{ name, user, thread string }{
		{"another user", "mallory", "t-user"},
		{"another thread", "alice", "t-elsewhere"},
	} {
		thread := "t-" + strings.ReplaceAll(tc.name, " ", "-")
		sid := identity.SandboxID("alice", thread)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		now := strconv.FormatInt(time.Now().UnixMilli(), 10)
		keys := statedb.NewKeys("", 0)
		err := rdb.HSet(ctx, keys.Sandbox(sid), "user", tc.user, "thread", tc.thread, "backend", "process",
			"incarnation", "planted", "url", decoy.URL, "state", "active", "created_ms", now).Err()
		if err == nil {
			err = rdb.ZAdd(ctx, keys.Active(keys.Bucket(sid)), redis.Z{Score: float64(time.Now().UnixMilli()), Member: sid}).Err()
		}
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		key := []string{"Authorization", "Bearer alice-key"}
		for _, r := range []struct{ method, path string }{
			{"POST", "/threads/" + thread + "/v1/shell/exec"},
			{"GET", "/threads/" + thread + "/sandbox"},
			{"PUT", "/threads/" + thread + "/sandbox"},
			{"DELETE", "/threads/" + thread + "/sandbox"},
			{"DELETE", "/threads/" + thread + "/sandbox?destroy=true"},
			{"POST", "/api/sandboxes"},
		} {
			var body any
			if r.method == "POST" {
				body = map[string]any{"command": "echo hi", "sandbox_id": sid, "thread_id": thread, "user_id": "alice"}
			}
			code, b, _ := call(t, r.method, g.URL+r.path, body, key...)
			if code != 409 || errorCode(t, b) != "identity_conflict" {
				t.Errorf("%s: %s %s: %d %s, want 409 identity_conflict", tc.name, r.method, r.path, code, b)
			}
		}
		if !strings.Contains(g.logs.String(), `"sandbox_id":"`+sid+`"`) || !strings.Contains(g.logs.String(), "identity conflict") {
			t.Errorf("%s: conflict not logged with its sandbox_id", tc.name)
		}
		if n, _ := rdb.Exists(t.Context(), keys.Sandbox(sid)).Result(); n != 1 {
			t.Errorf("%s: the conflicting record was removed by a caller it does not belong to", tc.name)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the mismatched record's sandbox was served %d requests", n)
	}
	if n := len(f.sandboxes()); n != 0 {
		t.Fatalf("%d sandboxes created over a conflicting record", n)
	}
}

// TestAliasSquattingAndExistenceOracle: bob cannot register alice's
// predictable sandbox id as his own; POST answers him byte for byte the same
// whether or not that sandbox exists; alice's GET and DELETE keep working;
// one alias name chosen by two users is two separate aliases.
func TestAliasSquattingAndExistenceOracle(t *testing.T) {
	t.Parallel()
	g := securedFleet(t)
	aliceKey, bobKey := []string{"X-API-Key", "alice-key"}, []string{"X-API-Key", "bob-key"}
	aliceID := identity.SandboxID("alice", "sq-1")
	provision(t, g, "alice-key", "alice", "sq-1")
	freeID := identity.SandboxID("alice", "never-created")

	squat := func(id string) (int, string) {
		code, body, _ := call(t, "POST", g.URL+"/api/sandboxes", map[string]any{"sandbox_id": id, "thread_id": "mine"}, bobKey...)
		return code, string(body)
	}
	existsCode, existsBody := squat(aliceID)
	freeCode, freeBody := squat(freeID)
	if existsCode != 409 || existsCode != freeCode || existsBody != freeBody {
		t.Fatalf("squat on an existing id: %d %s; on a free one: %d %s; want the same 409", existsCode, existsBody, freeCode, freeBody)
	}
	// Nothing was registered: alice's id is still alice's, for GET and DELETE.
	code, body, _ := call(t, "GET", g.URL+"/api/sandboxes/"+aliceID, nil, aliceKey...)
	if code != 200 || !strings.Contains(string(body), `"thread_id":"sq-1"`) || !strings.Contains(string(body), `"user_id":"alice"`) {
		t.Fatalf("alice's GET after bob's squat: %d %s", code, body)
	}
	if code, _, _ := call(t, "GET", g.URL+"/api/sandboxes/"+aliceID, nil, bobKey...); code != 404 {
		t.Fatalf("bob reads alice's sandbox: %d", code)
	}
	// bob's DELETE of alice's id answers like an unknown id and does nothing.
	unknownCode, unknownBody, _ := call(t, "DELETE", g.URL+"/api/sandboxes/"+freeID, nil, bobKey...)
	delCode, delBody, _ := call(t, "DELETE", g.URL+"/api/sandboxes/"+aliceID, nil, bobKey...)
	if delCode != unknownCode || strings.ReplaceAll(string(delBody), aliceID, freeID) != string(unknownBody) {
		t.Fatalf("bob deletes alice's id: %d %s; an unknown id: %d %s", delCode, delBody, unknownCode, unknownBody)
	}
	if code, _, _ := call(t, "GET", g.URL+"/api/sandboxes/"+aliceID, nil, aliceKey...); code != 200 {
		t.Fatalf("alice's sandbox after bob's delete: %d", code)
	}

	// A free-form alias (DeerFlow's older 8-character ids) is per user.
	for user, key := range map[string][]string{"alice": aliceKey, "bob": bobKey} {
		code, body, _ := call(t, "POST", g.URL+"/api/sandboxes", map[string]any{"sandbox_id": "3f9a1c2b", "thread_id": "alias-" + user}, key...)
		if code != 200 {
			t.Fatalf("%s creates alias 3f9a1c2b: %d %s", user, code, body)
		}
	}
	for user, key := range map[string][]string{"alice": aliceKey, "bob": bobKey} {
		code, body, _ := call(t, "GET", g.URL+"/api/sandboxes/3f9a1c2b", nil, key...)
		if code != 200 || !strings.Contains(string(body), `"thread_id":"alias-`+user+`"`) {
			t.Fatalf("%s's alias 3f9a1c2b: %d %s", user, code, body)
		}
	}

	if code, _, _ := call(t, "DELETE", g.URL+"/api/sandboxes/"+aliceID, nil, aliceKey...); code != 200 {
		t.Fatalf("alice deletes her sandbox: %d", code)
	}
	if code, _, _ := call(t, "GET", g.URL+"/api/sandboxes/"+aliceID, nil, aliceKey...); code != 404 {
		t.Fatalf("alice's sandbox after her delete: %d", code)
	}
}
