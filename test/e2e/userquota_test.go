package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// quotaAnswer is one PUT /threads/{thread}/sandbox as a user saw it.
type quotaAnswer struct {
	code       int
	retryAfter string
	body       string
	err        error
}

// putSandbox provisions thread for key's user through base; it is safe off
// the test's goroutine.
func putSandbox(base, key, thread string) quotaAnswer {
	req, err := http.NewRequest("PUT", base+"/threads/"+thread+"/sandbox", nil)
	if err != nil {
		return quotaAnswer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := clientFor(base).Do(req)
	if err != nil {
		return quotaAnswer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return quotaAnswer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b), err: err}
}

// TestPerUserQuotaUnderHardCap: two users under a hard cap of 10 with a
// per-user max of 5, three replicas on one Redis. Each user bursts 9
// concurrent creates spread over the replicas: exactly 5 of each succeed
// (the count holds across replicas), the rest are 429 + Retry-After naming
// max_sandboxes_per_user, and the second user always gets its 5 — never the
// 503 it got when one user could hold every slot.
func TestPerUserQuotaUnderHardCap(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "alice="+sha("alice-key")+",bob="+sha("bob-key"),
		"--max-sandboxes", "10", "--cap-mode", "hard", "--max-sandboxes-per-user", "5", "--max-creates-per-user", "0")
	replicas := []*gateway{f.start(), f.start(), f.start()}
	const burst, perUser = 9, 5
	for _, user := range []string{"alice", "bob"} {
		answers := make([]quotaAnswer, burst)
		var wg sync.WaitGroup
		for i := range burst {
			wg.Go(func() {
				answers[i] = putSandbox(replicas[i%len(replicas)].URL, user+"-key", fmt.Sprintf("q%d", i))
			})
		}
		wg.Wait()
		ok := 0
		for i, a := range answers {
			switch {
			case a.err != nil:
				t.Fatalf("%s q%d: %v", user, i, a.err)
			case a.code == 200:
				ok++
			case a.code == 429:
				var e struct {
					Error struct{ Code, Message string }
				}
				if err := json.Unmarshal([]byte(a.body), &e); err != nil || e.Error.Code != "user_quota" ||
					!strings.Contains(e.Error.Message, "max_sandboxes_per_user") || a.retryAfter == "" {
					t.Errorf("%s q%d: 429 without the limit or Retry-After: %q %s", user, i, a.retryAfter, a.body)
				}
			default:
				t.Errorf("%s q%d: %d %s", user, i, a.code, a.body)
			}
		}
		if ok != perUser {
			t.Errorf("%s: %d of %d creates succeeded, want %d", user, ok, burst, perUser)
		}
	}
	held := map[string]int{}
	for _, s := range f.sandboxes() {
		held[s.User]++
	}
	if held["alice"] != perUser || held["bob"] != perUser || len(held) != 2 {
		t.Fatalf("sandboxes per user: %v, want %d each", held, perUser)
	}
	// A destroyed sandbox gives its unit back on every replica.
	var victim string
	for i := range burst {
		if a := putSandbox(replicas[0].URL, "alice-key", fmt.Sprintf("q%d", i)); a.code == 200 {
			victim = fmt.Sprintf("q%d", i)
			break
		}
	}
	if code, body, _ := call(t, "DELETE", replicas[1].URL+"/threads/"+victim+"/sandbox?destroy=true", nil, bearer("alice-key")...); code != 204 {
		t.Fatalf("destroy %s: %d %s", victim, code, body)
	}
	if a := putSandbox(replicas[2].URL, "alice-key", "after-destroy"); a.code != 200 {
		t.Fatalf("create after a destroy: %d %s", a.code, a.body)
	}
	if a := putSandbox(replicas[0].URL, "alice-key", "one-more"); a.code != 429 {
		t.Fatalf("over the max again: %d %s", a.code, a.body)
	}
}
