package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/testutil"
)

// listeners lists the sockets pid listens on: TCP as host:port (a wildcard
// address as loopback), Unix by path ("@name" for abstract ones).
func listeners(t *testing.T, pid int) []string {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(l, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	var out []string
	for _, file := range []string{"tcp", "tcp6", "unix"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			switch {
			case file == "unix" && len(f) >= 8 && inodes[f[6]] && f[3] == "00010000": // __SO_ACCEPTCON
				out = append(out, "unix:"+f[7])
			case file != "unix" && len(f) >= 10 && inodes[f[9]] && f[3] == "0A": // TCP_LISTEN
				port, _ := strconv.ParseUint(f[1][strings.IndexByte(f[1], ':')+1:], 16, 16)
				host := "127.0.0.1"
				if file == "tcp6" {
					host = "::1"
				}
				out = append(out, "tcp:"+host+":"+strconv.Itoa(int(port)))
			}
		}
	}
	return out
}

// redisCLI is the attacker's command line: redis-cli against one target.
func redisCLI(target string, args ...string) []string {
	kind, addr, _ := strings.Cut(target, ":")
	argv := []string{"redis-cli"}
	if kind == "unix" {
		argv = append(argv, "-s", addr)
	} else {
		i := strings.LastIndexByte(addr, ':')
		argv = append(argv, "-h", addr[:i], "-p", addr[i+1:])
	}
	return append(append(argv, "--raw"), args...)
}

// TestEmbeddedRedisIsNotReachableByLocalUsers is finding 3 of issue 33:
// with authentication on and no redis_url, the local user nobody lists the
// gateway's listening sockets, tries each with KEYS * and SCAN, and must
// read nothing (on the old code it read alice's record and capability from
// the embedded Redis' loopback port).
func TestEmbeddedRedisIsNotReachableByLocalUsers(t *testing.T) {
	t.Parallel()
	testutil.Require(t, os.Geteuid() == 0, "root (the attacker runs as nobody)")
	_, err := exec.LookPath("redis-cli")
	testutil.Require(t, err == nil, "redis-cli")
	f := newFleetOn(t, "", "--auth-api-keys", "alice="+sha("alice-key"))
	g := f.start()
	sid, capURL := putThread(t, g.URL, "alice-key", "victim")
	capability := capURL[strings.LastIndex(capURL, "/")+1:]

	targets := listeners(t, g.cmd.Process.Pid)
	httpPort := g.URL[strings.LastIndexByte(g.URL, ':')+1:]
	if !slices.Contains(targets, "tcp:127.0.0.1:"+httpPort) {
		t.Fatalf("the scan misses the gateway's own HTTP port: %q", targets)
	}
	for _, target := range targets {
		keys, _ := asNobody(t, redisCLI(target, "KEYS", "*")...)
		scan, _ := asNobody(t, redisCLI(target, "SCAN", "0", "COUNT", "1000")...)
		for _, got := range []string{keys, scan} {
			if strings.Contains(got, sid) || strings.Contains(got, "{u:alice}") || strings.Contains(got, "{fleet}") {
				t.Errorf("nobody read the gateway's Redis keys at %s:\n%s", target, tail(got, 10))
			}
		}
		if target == "tcp:127.0.0.1:"+httpPort && strings.Contains(keys, "Could not connect") {
			t.Errorf("control: nobody could not reach the gateway's HTTP port: %s", keys)
		}
	}
	// What nobody did with the keys: the capability opens alice's sandbox.
	for _, target := range targets {
		if got, _ := asNobody(t, redisCLI(target, "HGET", "sandgate:default:{"+sid+"}:sbx", "cap")...); strings.Contains(got, capability) {
			t.Errorf("nobody read alice's capability at %s", target)
		}
	}
}

// noRedirect shows a redirect instead of following it.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// statusLogin logs key in on base and returns the session cookie.
func statusLogin(t *testing.T, base, key string) *http.Cookie {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/status/login", strings.NewReader("token="+url.QueryEscape(key)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == "sandgate_status" && c.MaxAge > 0 {
			if resp.StatusCode != 303 || resp.Header.Get("Location") != "/status" {
				t.Fatalf("login: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
			}
			return c
		}
	}
	t.Fatalf("login: %d, no session cookie in %q", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	return nil
}

// withCookie GETs path on base with the session cookie c.
func withCookie(t *testing.T, base, path string, c *http.Cookie) int {
	t.Helper()
	code, _, _ := call(t, "GET", base+path, nil, "Cookie", c.Name+"="+c.Value)
	return code
}

// TestStatusSessionIsOpaqueAndRevocable is the status half of finding 4 of
// issue 33: the login cookie was the credential itself (base64), Path=/, so
// a sandbox served on the gateway's origin received an admin's API key.
// Now the cookie is an opaque id: it neither holds nor decodes to the key,
// is scoped to /status, is accepted by another replica, and is refused once
// forged, expired, logged out or revoked.
func TestStatusSessionIsOpaqueAndRevocable(t *testing.T) {
	t.Parallel()
	const opsKey, aliceKey = "ops-key-0123456789", "alice-key-0123456789"
	f := newFleet(t, "--auth-api-keys", "ops="+sha(opsKey)+":threads+admin,alice="+sha(aliceKey))
	g1, g2 := f.start(), f.start()
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()

	c := statusLogin(t, g1.URL, opsKey)
	decoded := []string{c.Value}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(c.Value); err == nil {
			decoded = append(decoded, string(b))
		}
	}
	for _, d := range decoded {
		if strings.Contains(d, opsKey) || strings.Contains(d, "ops-key") {
			t.Errorf("the session cookie %q holds or decodes to the API key", c.Value)
		}
	}
	if c.Path != "/status" || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure {
		t.Errorf("cookie attributes: Path %q HttpOnly %v SameSite %v Secure %v (want /status, true, Strict, false on plain loopback)",
			c.Path, c.HttpOnly, c.SameSite, c.Secure)
	}
	// A browser (RFC 6265 path matching) sends it to the status routes only.
	jar, _ := cookiejar.New(nil)
	base, _ := url.Parse(g1.URL)
	jar.SetCookies(base.ResolveReference(&url.URL{Path: "/status/login"}), []*http.Cookie{c})
	for _, tc := range []struct {
		path string
		sent bool
	}{
		{"/status", true}, {"/status/sandboxes", true}, {"/status/events", true},
		{"/", false}, {"/threads/t1/v1/shell/exec", false}, {"/sandboxes/0123456789abcdef/v1/file/read", false},
		{"/c/x/v1/shell/exec", false}, {"/statusx", false},
	} {
		if got := len(jar.Cookies(base.ResolveReference(&url.URL{Path: tc.path}))) > 0; got != tc.sent {
			t.Errorf("cookie sent to %s: %v, want %v", tc.path, got, tc.sent)
		}
	}
	// Redis holds the session, not the credential, and not the id.
	keys, err := rdb.Keys(context.Background(), "*{ses:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("session keys in Redis: %q %v", keys, err)
	}
	if v, _ := rdb.Get(context.Background(), keys[0]).Result(); strings.Contains(v, opsKey) || strings.Contains(keys[0]+v, c.Value) {
		t.Errorf("Redis holds the credential or the session id: %s", keys[0])
	}
	if ttl := rdb.PTTL(context.Background(), keys[0]).Val(); ttl <= 7*time.Hour || ttl > 8*time.Hour {
		t.Errorf("session TTL %v, want 8h", ttl)
	}

	// Every replica accepts it.
	for _, g := range []*gateway{g1, g2} {
		if code := withCookie(t, g.URL, "/status/sandboxes", c); code != 200 {
			t.Errorf("%s: the session cookie gave %d", g.URL, code)
		}
	}

	var forged [32]byte
	_, _ = rand.Read(forged[:])
	for _, tc := range []struct{ name, value string }{
		{"a random id", base64.RawURLEncoding.EncodeToString(forged[:])},
		{"the old cookie: the credential in base64", base64.RawURLEncoding.EncodeToString([]byte(opsKey))},
		{"the id with one character changed", c.Value[:10] + string("AB"[btoi(c.Value[10] == 'A')]) + c.Value[11:]},
		{"garbage", "x"},
	} {
		if code := withCookie(t, g2.URL, "/status/sandboxes", &http.Cookie{Name: c.Name, Value: tc.value}); code != 401 {
			t.Errorf("%s: %d, want 401", tc.name, code)
		}
	}

	// Expired: the record's TTL is the session's expiry.
	expiring := statusLogin(t, g1.URL, aliceKey)
	for _, k := range rdb.Keys(context.Background(), "*{ses:*").Val() {
		if k != keys[0] {
			rdb.PExpire(context.Background(), k, time.Millisecond)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if code := withCookie(t, g1.URL, "/status/sandboxes", expiring); code != 401 {
		t.Errorf("an expired session: %d, want 401", code)
	}

	// A cross-site logout is refused and the session survives.
	code, _, _ := call(t, "POST", g2.URL+"/status/logout", nil, "Cookie", c.Name+"="+c.Value, "Origin", "http://evil.example",
		"Content-Type", "application/x-www-form-urlencoded")
	if code != 403 || withCookie(t, g1.URL, "/status/sandboxes", c) != 200 {
		t.Errorf("cross-site logout: %d, and the session must survive it", code)
	}
	// Logout on one replica revokes the session on all.
	req, _ := http.NewRequest("POST", g2.URL+"/status/logout", nil)
	req.Header.Set("Cookie", c.Name+"="+c.Value)
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/status/login" {
		t.Fatalf("logout: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if code := withCookie(t, g1.URL, "/status/sandboxes", c); code != 401 {
		t.Errorf("after logout: %d, want 401", code)
	}

	// Revocation: alice may not revoke ops' sessions; ops revokes alice's.
	a1, a2 := statusLogin(t, g1.URL, aliceKey), statusLogin(t, g2.URL, aliceKey)
	if code, _, _ := call(t, "DELETE", g1.URL+"/status/sessions/ops", nil, "Authorization", "Bearer "+aliceKey); code != 403 {
		t.Errorf("alice revoking ops' sessions: %d, want 403", code)
	}
	code, body, _ := call(t, "DELETE", g2.URL+"/status/sessions/alice", nil, "Authorization", "Bearer "+opsKey)
	if code != 200 || !strings.Contains(string(body), `"revoked":2`) {
		t.Errorf("admin revoke: %d %s", code, body)
	}
	for _, s := range []*http.Cookie{a1, a2} {
		if code := withCookie(t, g1.URL, "/status/sandboxes", s); code != 401 {
			t.Errorf("a revoked session: %d, want 401", code)
		}
	}
	// A user revokes its own from the session itself.
	a3 := statusLogin(t, g1.URL, aliceKey)
	code, body, _ = call(t, "DELETE", g1.URL+"/status/sessions", nil, "Cookie", a3.Name+"="+a3.Value)
	if code != 200 || !strings.Contains(string(body), `"revoked":1`) || withCookie(t, g2.URL, "/status/sandboxes", a3) != 401 {
		t.Errorf("self revoke: %d %s", code, body)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// openStream opens the event stream at path (GET) as key; it returns the
// status and, for a 200, the open response (the caller closes it) else the
// body. A 200 is sent once the stream holds its place.
func openStream(t *testing.T, g *gateway, path, key string) (int, *http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", g.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		resp.Body.Close()
		return resp.StatusCode, nil, b.String()
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("stream did not open: Content-Type %q", ct)
	}
	return 200, resp, ""
}

// TestStatusStreamsAreSharedPerUser is finding 8 of issue 33: one user
// opened all 256 status event streams of a replica and admins got 503; the
// provisioning-progress streams had no cap at all. Now 260 tries by one
// user, of either kind, stop at its cap (429 stream_limit) or, with a cap
// as high as the replica's, at the admins' reserve (503 status_streams,
// progress_streams); an admin still gets a stream either way.
func TestStatusStreamsAreSharedPerUser(t *testing.T) {
	t.Parallel()
	const status, progress = "/status/events", "/threads/t/sandbox/events"
	reserve := []string{"--max-streams-per-user", "256", "--admin-streams", "16"}
	for _, tc := range []struct {
		name    string
		path    string
		flags   []string
		open    int // streams alice gets
		code    int
		errCode string
	}{
		{"status: default per-user cap", status, nil, 8, 429, "stream_limit"},
		{"status: per-user cap as high as the replica's: the admins' reserve", status, reserve, 256 - 16, 503, "status_streams"},
		{"progress: default per-user cap", progress, nil, 8, 429, "stream_limit"},
		{"progress: per-user cap as high as the replica's: the admins' reserve", progress, reserve, 256 - 16, 503, "progress_streams"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, append([]string{"--auth-api-keys", "ops=" + sha("ops-key") + ":threads+admin,alice=" + sha("alice-key")}, tc.flags...)...)
			g := f.start()
			var open []*http.Response
			defer func() {
				for _, r := range open {
					r.Body.Close()
				}
			}()
			refused := map[string]int{}
			for range 260 {
				code, resp, body := openStream(t, g, tc.path, "alice-key")
				if code == 200 {
					open = append(open, resp)
					continue
				}
				refused[fmt.Sprintf("%d %s", code, errorCode(t, []byte(body)))]++
			}
			if len(open) != tc.open || refused[fmt.Sprintf("%d %s", tc.code, tc.errCode)] != 260-tc.open {
				t.Errorf("alice opened %d of 260 streams (want %d); refusals %v (want %d × %d %s)",
					len(open), tc.open, refused, 260-tc.open, tc.code, tc.errCode)
			}
			code, resp, body := openStream(t, g, tc.path, "ops-key")
			if code != 200 {
				t.Fatalf("the admin's stream: %d %s", code, body)
			}
			resp.Body.Close()
		})
	}
}
