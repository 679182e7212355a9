package pool

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

func testTemplates() Templates {
	open := backend.Egress{Mode: backend.EgressOpen}
	return newTemplates([]Template{
		{Name: "python", Backend: backend.Template{Name: "python", Image: "py:1"}, Env: map[string]string{"T": "py"}},
		{Name: "small", Backend: backend.Template{Name: "small", Memory: 64 << 20}, MaxMemory: 128 << 20, Egress: &open},
	}, "small")
}

func TestTemplatesCheck(t *testing.T) {
	t.Parallel()
	ts := testTemplates()
	for _, tc := range []struct {
		name      string
		o         Options
		field     string // "" = accepted
		forbidden bool
	}{
		{"default", Options{}, "", false},
		{"named", Options{Template: "python", Env: map[string]string{"A": "1"}, Metadata: map[string]string{"k": "v"}}, "", false},
		{"memory at the ceiling", Options{Template: "small", Memory: 128 << 20}, "", false},
		{"memory under the default", Options{Memory: 32 << 20}, "", false},
		{"unknown template", Options{Template: "nope"}, "template", false},
		{"memory past the ceiling", Options{Memory: 128<<20 + 1}, "memory", true},
		{"memory without a limit", Options{Template: "python", Memory: 1}, "memory", true},
		{"negative memory", Options{Memory: -1}, "memory", false},
		{"proxy env", Options{Env: map[string]string{"https_proxy": "x"}}, "env", true},
		{"server env", Options{Env: map[string]string{"SANDGATE_X": "x"}}, "env", true},
		{"env name with =", Options{Env: map[string]string{"A=B": "x"}}, "env", false},
		{"env NUL", Options{Env: map[string]string{"A": "x\x00"}}, "env", false},
		{"empty metadata key", Options{Metadata: map[string]string{"": "x"}}, "metadata", false},
	} {
		err := ts.Check(tc.o)
		var oe *OptionError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.field != "" && (!errors.As(err, &oe) || oe.Field != tc.field || oe.Forbidden != tc.forbidden):
			t.Errorf("%s: %v, want field %s forbidden %v", tc.name, err, tc.field, tc.forbidden)
		}
	}
	many := map[string]string{}
	for i := range maxOptionEntries + 1 {
		many[string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	if err := ts.Check(Options{Metadata: many}); err == nil {
		t.Errorf("%d metadata entries accepted", len(many))
	}
}

func TestValidateTemplates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		list []Template
		def  string
		ok   bool
	}{
		{"none", nil, "", true},
		{"default names one", []Template{{Name: "a"}}, "a", true},
		{"default names none", []Template{{Name: "a"}}, "b", false},
		{"twice", []Template{{Name: "a"}, {Name: "a"}}, "", false},
		{"bad name", []Template{{Name: "A/B"}}, "", false},
		{"memory over max", []Template{{Name: "a", Backend: backend.Template{Memory: 2}, MaxMemory: 1}}, "", false},
		{"bad egress", []Template{{Name: "a", Egress: &backend.Egress{Mode: "wide"}}}, "", false},
		{"bad env", []Template{{Name: "a", Env: map[string]string{"=": "x"}}}, "", false},
	} {
		if err := validateTemplates(tc.list, tc.def); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// The spec of a create: env layered fleet < template < create, the
// create's memory over the template's, and the egress of an admin over the
// template's over the fleet's.
func TestRecipeApply(t *testing.T) {
	t.Parallel()
	r := recipe{env: map[string]string{"F": "fleet", "T": "fleet"}, egress: backend.Egress{Mode: backend.EgressProxy}, fleet: "f"}
	ts := testTemplates()
	small, _ := ts.pick("")
	spec := r.apply(backend.Spec{SandboxID: "0123456789abcdef"}, small, Options{Env: map[string]string{"C": "create"}, Memory: 100 << 20},
		backend.Egress{}, false)
	if want := map[string]string{"F": "fleet", "T": "fleet", "C": "create"}; !maps.Equal(spec.Env, want) {
		t.Errorf("env %v, want %v", spec.Env, want)
	}
	if spec.Template.Memory != 100<<20 || spec.Template.Name != "small" || spec.Egress.Mode != backend.EgressOpen ||
		spec.Labels[backend.LabelTemplate] != "small" {
		t.Errorf("spec %+v", spec)
	}
	py, _ := ts.pick("python")
	admin := backend.Egress{Mode: backend.EgressNone}
	spec = r.apply(backend.Spec{SandboxID: "0123456789abcdef"}, py, Options{}, admin, true)
	if spec.Env["T"] != "py" || spec.Egress.Mode != backend.EgressNone || spec.Template.Image != "py:1" {
		t.Errorf("spec %+v", spec)
	}
	if r.env["T"] != "fleet" {
		t.Errorf("the fleet's env was changed: %v", r.env)
	}
}

// The prewarm pool's shares: the minimums first, the rest by the decayed
// claims since the first look, evenly before any.
func TestDemandTargets(t *testing.T) {
	t.Parallel()
	tpls := []Template{{Name: "a", Prewarm: 1}, {Name: "b"}, {Name: "c"}, {Name: "d"}}
	fps := map[string]string{"a": "fa", "b": "fb", "c": "fc", "d": "fd"}
	d := newDemand(tpls, fps)
	t0 := time.Unix(1000, 0)
	d.observe(map[string]int64{"fa": 50}, t0) // the baseline: not demand
	if got := d.targets(9); got["fa"] != 3 || got["fb"] != 2 || got["fc"] != 2 || got["fd"] != 2 {
		t.Errorf("before any claim: %v, want a 1+2 and 2 each", got)
	}
	d.observe(map[string]int64{"fa": 50, "fb": 6, "fc": 2}, t0.Add(time.Second))
	// Weights 6, 2 and none, each plus the prior of 2: 8 spare shared 4, 2, 1, 1.
	if got := d.targets(9); got["fa"] != 2 || got["fb"] != 4 || got["fc"] != 2 || got["fd"] != 1 {
		t.Errorf("after b 6 and c 2 claims: %v", got)
	}
	// Half-lives later only the new claims count.
	d.observe(map[string]int64{"fa": 50, "fb": 6, "fc": 2, "fd": 40}, t0.Add(time.Second+10*demandHalfLife))
	if got := d.targets(9); got["fd"] != 7 || got["fa"] != 1 || got["fc"] != 0 {
		t.Errorf("after d's burst: %v", got)
	}
	if got := d.targets(0); got["fa"] != 1 || got["fb"]+got["fc"]+got["fd"] != 0 {
		t.Errorf("total below the minimums: %v", got)
	}
}

func TestSameSandbox(t *testing.T) {
	t.Parallel()
	ts := testTemplates()
	for _, tc := range []struct {
		name string
		a, b Options
		same bool
	}{
		{"the default named or not", Options{}, Options{Template: "small"}, true},
		{"the template's memory named or not", Options{}, Options{Memory: 64 << 20}, true},
		{"metadata only", Options{Metadata: map[string]string{"a": "1"}}, Options{Metadata: map[string]string{"a": "2"}}, true},
		{"another template", Options{}, Options{Template: "python"}, false},
		{"env", Options{}, Options{Env: map[string]string{"A": "1"}}, false},
		{"memory", Options{}, Options{Memory: 100 << 20}, false},
		{"a template since removed", Options{Template: "gone"}, Options{}, false},
	} {
		if got := ts.sameSandbox(tc.a, tc.b); got != tc.same {
			t.Errorf("%s: same = %v", tc.name, got)
		}
	}
}
