package backend

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

func TestUnixURLParsing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url, base, socket string
	}{
		{"unix:///run/s/a.sock", "http://" + UnixHost, "/run/s/a.sock"},
		{"unix://relative.sock", "unix://relative.sock", ""}, // not absolute: not a socket URL
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080", ""},
		{"http://h/sandboxes/x", "http://h/sandboxes/x", ""},
	} {
		base, socket := HTTPBase(tc.url)
		if base != tc.base || socket != tc.socket {
			t.Errorf("HTTPBase(%q) = %q, %q; want %q, %q", tc.url, base, socket, tc.base, tc.socket)
		}
	}
	if got := UnixURL("/a/b.sock"); got != "unix:///a/b.sock" {
		t.Errorf("UnixURL = %q", got)
	}
}

// A sandbox on a Unix socket is probed through it, with its secret, also
// when its path is too long for a socket address (a deep data_dir).
func TestWaitReadyUnixSocket(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), strings.Repeat("deep-", 25))} {
		waitReadyOn(t, dir)
	}
}

func waitReadyOn(t *testing.T, dir string) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "0123456789abcdef.sock")
	d, err := OwnDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := ListenSocket(d, filepath.Base(sock), 0)
	d.Close()
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandbox" || r.Host != UnixHost || r.Header.Get(sandboxspec.SecretHeader) != "s3" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := WaitReadySecret(ctx, UnixURL(sock), "s3"); err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if err := WaitReadySecret(short, UnixURL(sock), "wrong"); err == nil {
		t.Fatal("a wrong secret was taken as ready")
	}
}

func TestLogURLHidesSocketPaths(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"unix:///srv/data/sandboxes/docker/0123456789abcdef/api.sock": "unix socket",
		"http://127.0.0.1:40000": "http://127.0.0.1:40000",
	} {
		if got := LogURL(in); got != want {
			t.Errorf("LogURL(%q) = %q, want %q", in, got, want)
		}
	}
}
