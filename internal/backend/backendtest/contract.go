package backendtest

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
)

// Harness is what the contract needs of one backend.
type Harness struct {
	// Name is the backend's Info.Backend.
	Name string
	// New returns a backend instance. All instances share one state (state
	// dir, engine and container prefix, namespace, provisioner), as gateway
	// replicas do: one finds what another made.
	New func(t *testing.T) backend.Backend
	// Spec builds a thread's spec; nil is Spec with the thread's mounts
	// under a data dir of the run's own. Specs of one thread must share its
	// data, or files cannot survive a recreate.
	Spec func(t *testing.T, user, thread string) backend.Spec
	// Instance is the LabelInstance the backend sets ("" = none).
	Instance string

	// BindsHostDirs: the backend binds the thread's host dirs, so it makes
	// them (process, docker, applecontainer).
	BindsHostDirs bool

	// What the backend cannot do; the zero value claims everything.

	// NoSecret: its server takes no secret of its own, Info.Secret is ""
	// and the shared sandbox_api_key applies.
	NoSecret bool
	// NoPersistentFiles: a recreated sandbox does not see the files the
	// one before it wrote.
	NoPersistentFiles bool
	// IDLabelsOnly: Info.Labels holds the sandbox id, user and thread
	// only; the runtime keeps no labels of Sandgate's.
	IDLabelsOnly bool
	// DestroyIgnoresIncarnation: Destroy of an old incarnation takes the
	// current one too (the runtime names sandboxes by id alone).
	DestroyIgnoresIncarnation bool

	// Prewarmed runs the contract on sandboxes made the prewarm pool's way
	// (see Prewarmed): the backend must be a backend.Binder whose specs
	// mount backend.ThreadMounts.
	Prewarmed bool
}

// Run checks the contract of backend.Backend as parallel subtests, each on
// a thread of its own.
func Run(t *testing.T, h Harness) {
	t.Helper()
	c := &contract{Harness: h}
	if c.Spec == nil {
		dataDir := t.TempDir()
		c.Spec = func(t *testing.T, user, thread string) backend.Spec {
			return Spec(t, backend.MountConfig{DataDir: dataDir}, user, thread)
		}
	}
	if h.Prewarmed {
		c.New = func(t *testing.T) backend.Backend { return Prewarmed(h.New(t)) }
	}
	type subtest struct {
		name string
		run  func(*testing.T)
	}
	subtests := []subtest{
		{"CreateDescribesAServingSandbox", c.createDescribes},
		{"FilesSurviveRecreate", c.filesSurviveRecreate},
		{"DiscoverAndListFromAnotherInstance", c.discoverAndList},
		{"Destroy", c.destroy},
		{"CreateIsIdempotent", c.idempotentCreate},
		{"ConcurrentCreatesMakeOne", c.concurrentCreates},
	}
	if h.BindsHostDirs {
		subtests = append(subtests, subtest{"CreateMakesTheHostDirs", c.hostDirs})
	}
	for _, st := range subtests {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			st.run(t)
		})
	}
}

type contract struct{ Harness }

// spec is the harness's spec with what the pool adds: the identity labels
// over a configured one, and a freshly minted secret.
func (c *contract) spec(t *testing.T, thread string) backend.Spec {
	s := c.Spec(t, "contract", thread)
	s.Labels = backend.IdentityLabels(s, c.Instance, map[string]string{"sandgate.test/suite": "contract"})
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	s.Secret = hex.EncodeToString(b)
	return s
}

func (c *contract) createDescribes(t *testing.T) {
	s := c.spec(t, "create")
	info := MustCreate(t, c.New(t), s)
	if info.SandboxID != s.SandboxID || info.User != s.User || info.Thread != s.Thread || info.Backend != c.Name ||
		info.Incarnation == "" || info.URL == "" {
		t.Errorf("Create = %+v, want the spec's id, user and thread, backend %q, an incarnation and a URL", info, c.Name)
	}
	if c.NoSecret {
		if info.Secret != "" {
			t.Errorf("a backend without secrets returned one")
		}
	} else {
		if info.Secret != s.Secret {
			t.Errorf("Info.Secret is not the spec's secret")
		}
		if got := Status(t, info.URL, ""); got != http.StatusUnauthorized {
			t.Errorf("GET /v1/sandbox without the secret = %d, want 401", got)
		}
	}
	if got := Status(t, info.URL, info.Secret); got != http.StatusOK {
		t.Fatalf("GET /v1/sandbox = %d, want 200", got)
	}
	if res := Exec(t, info, "echo contract-$((6*7))"); res.ExitCode != 0 || strings.TrimSpace(res.Output) != "contract-42" {
		t.Errorf("exec = %+v, want contract-42", res)
	}
	c.checkLabels(t, "Create", info, s)
}

// checkLabels: the labels the reconciler adopts a sandbox by are on info.
func (c *contract) checkLabels(t *testing.T, from string, info backend.Info, s backend.Spec) {
	t.Helper()
	want := s.Labels
	if c.IDLabelsOnly {
		want = map[string]string{backend.LabelSandboxID: s.SandboxID, backend.LabelUser: s.User, backend.LabelThread: s.Thread}
	}
	for k, v := range want {
		if info.Labels[k] != v {
			t.Errorf("%s: label %s = %q, want %q", from, k, info.Labels[k], v)
		}
	}
}

func (c *contract) filesSurviveRecreate(t *testing.T) {
	if c.NoPersistentFiles {
		t.Skip("the harness says a recreated sandbox does not keep the thread's files")
	}
	b := c.New(t)
	s := c.spec(t, "files")
	const file, content = backend.VirtualWorkspace + "/x", "kept across incarnations\n"
	old := MustCreate(t, b, s)
	if err := WriteFile(t, old, file, content); err != nil {
		t.Fatal(err)
	}
	if err := b.Destroy(Ctx(t), old); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	cur := MustCreate(t, b, s)
	if cur.Incarnation == old.Incarnation {
		t.Fatalf("Create after Destroy returned the destroyed incarnation %s", old.Incarnation)
	}
	if got, err := ReadFile(t, cur, file); err != nil || got != content {
		t.Fatalf("read back %s = %q, %v; want %q", file, got, err, content)
	}
	if c.DestroyIgnoresIncarnation {
		return
	}
	// A stale Destroy (a replica late with the old incarnation) spares the new one.
	if err := b.Destroy(Ctx(t), old); err != nil {
		t.Fatalf("Destroy of the old incarnation: %v", err)
	}
	if ok, err := b.Alive(Ctx(t), cur); err != nil || !ok {
		t.Fatalf("the new incarnation after destroying the old one: Alive = %v, %v", ok, err)
	}
}

func (c *contract) discoverAndList(t *testing.T) {
	s := c.spec(t, "discover")
	info := MustCreate(t, c.New(t), s)
	other := c.New(t)
	got, ok, err := other.Discover(Ctx(t), s.SandboxID)
	if err != nil || !ok {
		t.Fatalf("Discover from another instance = %v, %v", ok, err)
	}
	if got.SandboxID != info.SandboxID || got.User != info.User || got.Thread != info.Thread || got.URL != info.URL ||
		got.Incarnation != info.Incarnation || got.Backend != info.Backend || got.Secret != info.Secret {
		t.Errorf("discovered %+v, created %+v", got, info)
	}
	c.checkLabels(t, "Discover", got, s)
	if ok, err := other.Alive(Ctx(t), got); err != nil || !ok {
		t.Errorf("Alive from another instance = %v, %v", ok, err)
	}
	if res := Exec(t, got, "echo discovered"); res.ExitCode != 0 {
		t.Errorf("exec on the discovered sandbox = %+v", res)
	}
	l := listed(t, other, s.SandboxID)
	if len(l) != 1 || l[0].Incarnation != info.Incarnation || l[0].URL != info.URL {
		t.Fatalf("List from another instance = %+v, want the one sandbox %s", l, info.Incarnation)
	}
	c.checkLabels(t, "List", l[0], s)
	if _, ok, err := other.Discover(Ctx(t), identity.SandboxID("contract", "never-created")); ok || err != nil {
		t.Errorf("Discover of an id never created = %v, %v", ok, err)
	}
}

func (c *contract) destroy(t *testing.T) {
	b := c.New(t)
	s := c.spec(t, "destroy")
	info := MustCreate(t, b, s)
	if err := b.Destroy(Ctx(t), info); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	// A backend may learn of the end through a watch: Alive may lag a little.
	Eventually(t, "Alive is false after Destroy", func() bool {
		ok, err := b.Alive(Ctx(t), info)
		return err == nil && !ok
	})
	if _, ok, err := b.Discover(Ctx(t), s.SandboxID); ok || err != nil {
		t.Errorf("Discover after Destroy = %v, %v", ok, err)
	}
	if l := listed(t, b, s.SandboxID); len(l) != 0 {
		t.Errorf("List after Destroy = %+v", l)
	}
	Eventually(t, "the destroyed sandbox stops answering", func() bool {
		return Status(t, info.URL, info.Secret) != http.StatusOK
	})
	for _, again := range []backend.Info{info, {SandboxID: s.SandboxID}, {SandboxID: identity.SandboxID("contract", "never-created")}} {
		if err := b.Destroy(Ctx(t), again); err != nil {
			t.Errorf("Destroy(%s, incarnation %q) of a gone sandbox = %v, want nil", again.SandboxID, again.Incarnation, err)
		}
	}
}

func (c *contract) idempotentCreate(t *testing.T) {
	a, b := c.New(t), c.New(t)
	s := c.spec(t, "idempotent")
	first := MustCreate(t, a, s)
	for i, inst := range []backend.Backend{a, b} {
		again, err := inst.Create(Ctx(t), s)
		if err != nil || again.Incarnation != first.Incarnation || again.URL != first.URL {
			t.Errorf("Create #%d of a running sandbox = %+v, %v; want incarnation %s", i+2, again, err, first.Incarnation)
		}
	}
}

func (c *contract) concurrentCreates(t *testing.T) {
	// Two instances, as two gateway replicas racing for one thread.
	insts := []backend.Backend{c.New(t), c.New(t)}
	s := c.spec(t, "concurrent")
	infos := make([]backend.Info, 4)
	errs := make([]error, len(infos))
	var wg sync.WaitGroup
	for i := range infos {
		wg.Go(func() { infos[i], errs[i] = insts[i%2].Create(Ctx(t), s) })
	}
	wg.Wait()
	for i := range infos {
		if errs[i] == nil {
			destroyLater(t, insts[0], infos[i])
		}
	}
	for i := range infos {
		if errs[i] != nil || infos[i].Incarnation != infos[0].Incarnation || infos[i].URL != infos[0].URL {
			t.Fatalf("create %d = %+v, %v; create 0 = %+v", i, infos[i], errs[i], infos[0])
		}
	}
	if l := listed(t, insts[0], s.SandboxID); len(l) != 1 || l[0].Incarnation != infos[0].Incarnation {
		t.Fatalf("List after concurrent creates = %+v, want one sandbox %s", l, infos[0].Incarnation)
	}
	// The sandbox they agree on kept its workspace: what it writes there is
	// the thread's, and the next incarnation finds it.
	if c.NoPersistentFiles {
		return
	}
	const file, content = backend.VirtualWorkspace + "/concurrent", "written after the race\n"
	if err := WriteFile(t, infos[0], file, content); err != nil {
		t.Fatal(err)
	}
	if err := insts[0].Destroy(Ctx(t), infos[0]); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	next := MustCreate(t, insts[1], s)
	if got, err := ReadFile(t, next, file); err != nil || got != content {
		t.Fatalf("the workspace of the sandbox the concurrent creates agreed on was lost: read back %s = %q, %v; want %q",
			file, got, err, content)
	}
}

// listed returns the sandboxes List reports under sid.
func listed(t *testing.T, b backend.Backend, sid string) []backend.Info {
	t.Helper()
	all, err := b.List(Ctx(t))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var out []backend.Info
	for _, i := range all {
		if i.SandboxID == sid {
			out = append(out, i)
		}
	}
	return out
}
