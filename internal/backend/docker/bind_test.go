package docker

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
)

// TestIdentify: who a container is, from its labels, its name and its
// claim record; every way a record can be missing, stale or forged makes
// a pre-started container an orphan, never an unclaimed one.
func TestIdentify(t *testing.T) {
	t.Parallel()
	const pw, sid, other = "00000000000000aa", "00000000000000bb", "00000000000000cc"
	socketDir := t.TempDir()
	d := newWithEngine(Config{Image: "x", ContainerPrefix: "p", SocketDir: t.TempDir()}, nil, nil)
	mounts := []container.MountPoint{{Destination: apiMount, Source: filepath.Join(socketDir, pw, apiDirName)}}
	warmLabels := map[string]string{backend.LabelManagedBy: backend.ManagedByValue, backend.LabelSandboxID: pw,
		backend.LabelUser: "", backend.LabelThread: "", backend.LabelPrewarm: "fp", backend.LabelFleet: "f",
		labelSecret: "s3cret", labelAPI: apiUnix}
	claimLabels := map[string]string{backend.LabelManagedBy: backend.ManagedByValue, backend.LabelSandboxID: sid,
		backend.LabelUser: "u", backend.LabelThread: "t", backend.LabelFleet: "f", "k": "v"}
	good := claimRecord{Container: "c1", SandboxID: sid, User: "u", Thread: "t", Labels: claimLabels}
	// The record is found where the container's socket dir is, not in this
	// instance's SocketDir (another replica's).
	if got, want := d.claimPath("c1", mounts), filepath.Join(socketDir, claimsDirName, "c1.json"); got != want {
		t.Fatalf("claimPath = %s, want %s", got, want)
	}
	for _, tc := range []struct {
		name    string
		labels  map[string]string
		nameSID string
		record  *claimRecord
		raw     string
		ok      bool
		want    claimState
		wantSID string
	}{
		{name: "not ours", labels: map[string]string{backend.LabelSandboxID: pw}, nameSID: pw},
		{name: "a created sandbox", labels: claimLabels, nameSID: sid, ok: true, want: unclaimed, wantSID: sid},
		{name: "unclaimed", labels: warmLabels, nameSID: pw, ok: true, want: unclaimed, wantSID: pw},
		{name: "claimed", labels: warmLabels, nameSID: sid, record: &good, ok: true, want: claimed, wantSID: sid},
		{name: "renamed, record lost", labels: warmLabels, nameSID: sid, ok: true, want: orphaned, wantSID: pw},
		{name: "record, not renamed (claim cut short)", labels: warmLabels, nameSID: pw, record: &good, ok: true, want: orphaned, wantSID: pw},
		{name: "record of another container", labels: warmLabels, nameSID: sid, ok: true, want: orphaned, wantSID: pw,
			record: &claimRecord{Container: "c2", SandboxID: sid, User: "u", Thread: "t"}},
		{name: "record naming another sandbox than the name", labels: warmLabels, nameSID: other, record: &good, ok: true,
			want: orphaned, wantSID: pw},
		{name: "corrupt record", labels: warmLabels, nameSID: sid, raw: `{"sandbox_id":`, ok: true, want: orphaned, wantSID: pw},
		{name: "a name of another prefix", labels: warmLabels, nameSID: "", ok: true, want: orphaned, wantSID: pw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := d.claimPath("c1", mounts)
			_ = os.Remove(path)
			switch {
			case tc.record != nil:
				if err := writeClaim(path, *tc.record); err != nil {
					t.Fatal(err)
				}
			case tc.raw != "":
				if err := os.WriteFile(path, []byte(tc.raw), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			it, ok := d.identify("c1", tc.nameSID, maps.Clone(tc.labels), mounts)
			if ok != tc.ok || !ok {
				if ok != tc.ok {
					t.Fatalf("identify ok = %v, want %v", ok, tc.ok)
				}
				return
			}
			if it.state != tc.want || it.sid != tc.wantSID {
				t.Fatalf("identify = state %d, sid %s; want %d, %s", it.state, it.sid, tc.want, tc.wantSID)
			}
			switch it.state {
			case claimed:
				want := maps.Clone(claimLabels)
				want[labelSecret], want[labelAPI] = "s3cret", apiUnix
				if it.user != "u" || it.thread != "t" || it.rid != pw || !maps.Equal(it.labels, want) {
					t.Errorf("claimed: user %q thread %q rid %s labels %v; want u, t, %s, %v", it.user, it.thread, it.rid, it.labels, pw, want)
				}
				if !it.is(sid) || it.is(pw) {
					t.Error("a claimed container answers to its old id, or not to its new one")
				}
			case orphaned:
				// Nothing to adopt, claim or reach it by.
				if it.user != "" || it.thread != "" || it.labels[backend.LabelPrewarm] != "" || it.labels[backend.LabelUser] != "" ||
					it.labels[backend.LabelThread] != "" || it.labels[labelSecret] != "" {
					t.Errorf("orphan identity %+v carries a user, thread, prewarm label or secret", it)
				}
				if !it.is(pw) || (tc.nameSID != "" && !it.is(tc.nameSID)) || it.is(other) && tc.nameSID != other {
					t.Error("an orphan is not destroyable by the ids it is known by, or is by another")
				}
			}
		})
	}
	if err := writeClaim(d.claimPath("c1", mounts), good); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(d.claimPath("c1", mounts)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("claim record mode = %v, %v; want 0600", st.Mode(), err)
	}
	if got := d.nameSID([]string{"/p-" + sid}); got != sid {
		t.Errorf("nameSID = %q", got)
	}
	if got := d.nameSID([]string{"/p-x-" + sid, "/q-" + sid, "/p-" + sid + "0"}); got != "" {
		t.Errorf("nameSID of other prefixes = %q", got)
	}
}

// claimHarness starts pre-started containers the pool's way and claims them.
type claimHarness struct {
	*harness
	d       *Docker
	dataDir string
}

func newClaimHarness(t *testing.T, mut ...func(*Config)) *claimHarness {
	h := newHarness(t)
	return &claimHarness{harness: h, d: h.backend(mut...), dataDir: t.TempDir()}
}

// warm starts an unclaimed pre-started container.
func (h *claimHarness) warm(t *testing.T, egress backend.Egress) backend.Info {
	t.Helper()
	pw := randHex(8)
	mounts, err := backend.PrewarmMounts(backend.MountConfig{DataDir: h.dataDir}, pw)
	if err != nil {
		t.Fatal(err)
	}
	spec := backend.Spec{SandboxID: pw, Mounts: mounts, Secret: randHex(16), Egress: egress}
	spec.Labels = backend.IdentityLabels(spec, "", map[string]string{backend.LabelFleet: "f"})
	spec.Labels[backend.LabelPrewarm] = "fp"
	return backendtest.MustCreate(t, h.d, spec)
}

// thread is a new thread's spec, as the pool builds it for a claim.
func (h *claimHarness) thread(t *testing.T, thread string, warm backend.Info) backend.Spec {
	t.Helper()
	s := backendtest.Spec(t, backend.MountConfig{DataDir: h.dataDir}, "binder", thread)
	s.Secret, s.Egress = warm.Secret, backend.Egress{}
	s.Labels = backend.IdentityLabels(s, "test", map[string]string{backend.LabelFleet: "f"})
	return s
}

// claim moves the data and claims warm for s.
func (h *claimHarness) claim(t *testing.T, warm backend.Info, s backend.Spec) (backend.Info, error) {
	t.Helper()
	if err := backend.AdoptPrewarmDirs(h.dataDir, warm.SandboxID, s.User, s.Thread); err != nil {
		t.Fatal(err)
	}
	return h.d.Bind(backendtest.Ctx(t), warm, s)
}

// TestClaimedRecordLostIsNeverUnclaimed attacks the tenant boundary: a
// claimed container whose claim record is lost must not come back as a
// pre-started sandbox (another thread would claim it and see the first
// thread's files) nor as anyone's, must not be claimable, and gives way
// to the thread's next create, which finds the thread's files.
func TestClaimedRecordLostIsNeverUnclaimed(t *testing.T) {
	t.Parallel()
	h := newClaimHarness(t)
	ctx := backendtest.Ctx(t)
	warm := h.warm(t, backend.Egress{})
	s := h.thread(t, "victim", warm)
	info, err := h.claim(t, warm, s)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if err := backendtest.WriteFile(t, info, backend.VirtualWorkspace+"/secret.txt", "victim's\n"); err != nil {
		t.Fatal(err)
	}
	record := h.d.claimPath(info.Incarnation, h.inspect(info.Incarnation).Mounts)
	if err := os.Remove(record); err != nil {
		t.Fatalf("remove the claim record: %v", err)
	}

	all, err := h.d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range all {
		if l.Incarnation != info.Incarnation {
			continue
		}
		if l.Labels[backend.LabelPrewarm] != "" || l.User != "" || l.Thread != "" || l.Secret != "" || l.SandboxID == s.SandboxID {
			t.Errorf("List reports the orphan as %+v: claimable, or someone's", l)
		}
	}
	if _, ok, err := h.d.Discover(ctx, s.SandboxID); ok || err != nil {
		t.Errorf("Discover of the orphan's thread = %v, %v; want not found", ok, err)
	}
	if _, ok, err := h.d.Discover(ctx, warm.SandboxID); ok || err != nil {
		t.Errorf("Discover of the orphan's pre-started id = %v, %v; want not found", ok, err)
	}
	for _, as := range []backend.Info{info, warm} {
		if ok, err := h.d.Alive(ctx, as); ok || err != nil {
			t.Errorf("Alive(%s) of the orphan = %v, %v; want false", as.SandboxID, ok, err)
		}
	}
	thief := h.thread(t, "thief", warm)
	if _, err := h.d.Bind(ctx, warm, thief); err == nil {
		t.Fatal("another thread claimed the orphan")
	}
	if socks, err := h.d.EgressSockets(ctx); err != nil || slices.ContainsFunc(socks, func(e backend.EgressSocket) bool {
		return e.Identity.SandboxID == s.SandboxID || e.Identity.SandboxID == warm.SandboxID
	}) {
		t.Errorf("EgressSockets = %+v, %v; the orphan must get no proxy", socks, err)
	}
	left, err := h.d.Leftovers(ctx, "f")
	if err != nil || !slices.Contains(left, backend.Leftover{Kind: "container", Name: info.Incarnation, SandboxID: warm.SandboxID}) {
		t.Errorf("Leftovers = %+v, %v; want the orphan, for prune", left, err)
	}

	// The thread's next create clears its name and keeps its files.
	again := backendtest.MustCreate(t, h.d, s)
	if again.Incarnation == info.Incarnation {
		t.Fatal("Create adopted the orphan")
	}
	if got, err := backendtest.ReadFile(t, again, backend.VirtualWorkspace+"/secret.txt"); err != nil || got != "victim's\n" {
		t.Errorf("the thread's file after the orphan made way = %q, %v", got, err)
	}
	if _, err := os.Stat(h.d.socketDir(warm.SandboxID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the orphan's socket dir is left: %v", err)
	}
}

// TestClaimThenDestroy: a claimed container answers to its new id only;
// Destroy removes it with its claim record and socket dir, and the egress
// proxy moves from the old identity to the new one on the same socket.
func TestClaimThenDestroy(t *testing.T) {
	t.Parallel()
	gate := &recordingGate{}
	h := newClaimHarness(t, func(c *Config) { c.Egress = gate })
	ctx := backendtest.Ctx(t)
	warm := h.warm(t, backend.Egress{Mode: backend.EgressProxy})
	s := h.thread(t, "destroyed", warm)
	info, err := h.claim(t, warm, s)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	sock := h.d.egressSocket(warm.SandboxID)
	if got := gate.last(); got.from != warm.SandboxID || got.opened.SandboxID != s.SandboxID || got.opened.User != s.User ||
		got.opened.Thread != s.Thread || got.path != sock {
		t.Errorf("egress after the claim: %+v; want %s's socket reassigned to %s/%s/%s on %s", got, warm.SandboxID, s.SandboxID, s.User, s.Thread, sock)
	}
	socks, err := h.d.EgressSockets(ctx)
	if err != nil || !slices.ContainsFunc(socks, func(e backend.EgressSocket) bool {
		return e.Identity.SandboxID == s.SandboxID && e.Identity.Thread == s.Thread && e.Path == sock
	}) {
		t.Errorf("EgressSockets = %+v, %v; want the thread's identity on the pre-started socket", socks, err)
	}
	if info.Labels[backend.LabelPrewarm] != "" || info.Labels[backend.LabelThread] != s.Thread || info.Secret != warm.Secret {
		t.Errorf("claimed info %+v: want the thread's labels, no prewarm label, the warm secret", info)
	}
	// The old id names nothing: a late Destroy of it spares the thread's sandbox.
	if err := h.d.Destroy(ctx, warm); err != nil {
		t.Errorf("Destroy of the claimed pre-started id: %v", err)
	}
	if ok, err := h.d.Alive(ctx, info); !ok || err != nil {
		t.Fatalf("the claimed sandbox after a Destroy of its old id: Alive = %v, %v", ok, err)
	}
	record := h.d.claimPath(info.Incarnation, h.inspect(info.Incarnation).Mounts)
	if err := h.d.Destroy(ctx, info); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	for _, p := range []string{record, h.d.socketDir(warm.SandboxID)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left after Destroy: %v", p, err)
		}
	}
	if got := gate.last().closed; got != s.SandboxID {
		t.Errorf("Destroy closed the proxy of %q, want %s", got, s.SandboxID)
	}
}

// TestConcurrentClaimsIntoOneID: two pre-started containers claimed into
// one sandbox id at once: the engine's name makes one win; the loser is
// left unclaimed, without a record, for its caller to destroy (or claim).
func TestConcurrentClaimsIntoOneID(t *testing.T) {
	t.Parallel()
	h := newClaimHarness(t)
	ctx := backendtest.Ctx(t)
	warms := []backend.Info{h.warm(t, backend.Egress{}), h.warm(t, backend.Egress{})}
	s := h.thread(t, "raced", warms[0])
	var wg sync.WaitGroup
	infos, errs := make([]backend.Info, 2), make([]error, 2)
	for i := range warms {
		wg.Go(func() { infos[i], errs[i] = h.d.Bind(ctx, warms[i], s) })
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("claims = %v, %v; want exactly one to win", errs[0], errs[1])
	}
	win, lose := 0, 1
	if errs[0] != nil {
		win, lose = 1, 0
	}
	if got, ok, err := h.d.Discover(ctx, s.SandboxID); !ok || err != nil || got.Incarnation != warms[win].Incarnation {
		t.Errorf("Discover after the race = %+v, %v, %v; want the winner %s", got, ok, err, warms[win].Incarnation)
	}
	loser := h.inspect(warms[lose].Incarnation)
	if loser.Name != "/"+h.d.name(warms[lose].SandboxID) {
		t.Errorf("the loser is named %s", loser.Name)
	}
	if _, err := os.Stat(h.d.claimPath(loser.ID, loser.Mounts)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the loser's claim record is left: %v", err)
	}
	first := infos[win]
	// One container claimed into two ids at once (the pool's Redis take
	// forbids it; the record's exclusive write makes sure): one thread
	// gets it, never both.
	others := []backend.Spec{h.thread(t, "raced-a", warms[lose]), h.thread(t, "raced-b", warms[lose])}
	for i := range others {
		wg.Go(func() { infos[i], errs[i] = h.d.Bind(ctx, warms[lose], others[i]) })
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("claims of one container = %v, %v; want exactly one", errs[0], errs[1])
	}
	w := 0
	if errs[0] != nil {
		w = 1
	}
	for i, o := range others {
		got, ok, err := h.d.Discover(ctx, o.SandboxID)
		if i == w && (!ok || err != nil || got.Thread != o.Thread || got.Incarnation != warms[lose].Incarnation) {
			t.Errorf("the winning thread's Discover = %+v, %v, %v", got, ok, err)
		}
		if i != w && (ok || err != nil) {
			t.Errorf("the losing thread found a sandbox: %+v, %v, %v", got, ok, err)
		}
	}
	if err := h.d.Destroy(ctx, infos[w]); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if ok, err := h.d.Alive(ctx, first); !ok || err != nil {
		t.Errorf("the first winner after the other's destroy: Alive = %v, %v", ok, err)
	}
}

// recordingGate stands in for the gateway's egress proxies, recording what
// the backend asks of it.
type recordingGate struct {
	mu  sync.Mutex
	log []gateCall
}

type gateCall struct {
	opened backend.EgressIdentity
	path   string
	closed string
	from   string // Reassign's
}

func (g *recordingGate) record(c gateCall) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.log = append(g.log, c)
	return nil
}

func (g *recordingGate) Open(id backend.EgressIdentity, path string) error {
	return g.record(gateCall{opened: id, path: path})
}

func (g *recordingGate) Reassign(from string, id backend.EgressIdentity, path string) error {
	return g.record(gateCall{from: from, opened: id, path: path})
}

func (g *recordingGate) Close(sid string) { _ = g.record(gateCall{closed: sid}) }

// last is the last call.
func (g *recordingGate) last() gateCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.log) == 0 {
		return gateCall{}
	}
	return g.log[len(g.log)-1]
}
