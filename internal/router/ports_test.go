package router

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sandgate/sandgate/internal/identity"
)

// A bad port, on either route form, is a 400 before any I/O: neither the
// pool nor the sandbox is asked anything.
func TestPortRoutesRefuseBadPortsBeforeIO(t *testing.T) {
	t.Parallel()
	sid := identity.SandboxID("default", "t1")
	got := make(chan received, 1)
	route, _ := sandbox(t, "s", recorder(got))
	fp := &fakePool{route: route}
	gw := httptest.NewServer(New(Deps{Pool: fp, Aliases: stubPool{}, HostSuffix: "sbx.test"}))
	t.Cleanup(gw.Close)
	cases := []struct{ name, path, host, wantMsg string }{
		{"zero", "/threads/t1/ports/0/", "", errBadPort.Error()},
		{"too big", "/threads/t1/ports/65536/x", "", errBadPort.Error()},
		{"leading zero", "/threads/t1/ports/03000/", "", errBadPort.Error()},
		{"sign", "/threads/t1/ports/+80/", "", errBadPort.Error()},
		{"letters", "/threads/t1/ports/http/", "", errBadPort.Error()},
		{"six digits", "/threads/t1/ports/100000/", "", errBadPort.Error()},
		{"escaped digit", "/threads/t1/ports/%33000/", "", errBadPort.Error()},
		{"bad thread first", "/threads/..x%2F/ports/3000/", "", ""},
		{"host, zero", "/", "0-" + sid + ".sbx.test", errBadHost.Error()},
		{"host, too big", "/", "70000-" + sid + ".sbx.test", errBadHost.Error()},
		{"host, leading zero", "/", "080-" + sid + ".sbx.test", errBadHost.Error()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, gw.URL+c.path, nil)
			if c.host != "" {
				req.Host = c.host
			}
			resp, err := gw.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var body struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(raw, &body) != nil || body.Error.Code != "bad_request" ||
				c.wantMsg != "" && body.Error.Message != c.wantMsg {
				t.Errorf("%s: %d %s, want 400 %q", c.path, resp.StatusCode, raw, c.wantMsg)
			}
		})
	}
	if calls, _ := fp.log(); len(calls) != 0 {
		t.Errorf("a refused port reached the pool: %q", calls)
	}
	select {
	case r := <-got:
		t.Errorf("a refused port reached the sandbox: %s %s", r.method, r.uri)
	default:
	}
}
