package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"
)

// httpVia is a busybox command that sends one HTTP request to proxy (the
// image has nc, no HTTP client). Its input stays open a while: nc passes
// on the end of its input as a half-close, and an HTTP server takes a
// client gone as a cancelled request.
func httpVia(proxy, method, target, host string) string {
	return viaNC(proxy, fmt.Sprintf(`%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n`, method, target, host))
}

func viaNC(proxy, request string) string {
	return fmt.Sprintf(`(printf '%s'; sleep 2) | nc -w 10 %s`, request, strings.ReplaceAll(proxy, ":", " "))
}

// TestDockerEgressBoundary: a container of Sandgate's image has no network
// but the proxy: the host's Redis and published ports and the other
// sandboxes are unreachable, the allow-listed origin works through the
// proxy, and other names and private answers are refused by it.
func TestDockerEgressBoundary(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	w := newEgressWorld(t)
	f := d.fleet(w.flags("proxy")...)
	g := f.start()
	const th = "egress-docker"

	out, code := run(t, g, th, "echo proxy=$HTTP_PROXY; ls /run/sandgate /run/sandgate/egress; cat /proc/net/dev")
	if code != 0 || !strings.Contains(out, "proxy=http://127.0.0.1:3128") || strings.Contains(out, "eth0") {
		t.Fatalf("sandbox environment or interfaces: exit %d\n%s", code, out)
	}
	// Allowed: forward. A CONNECT to the allowed name is answered, but
	// the plain request it then carries is refused (a tunnel carries TLS
	// for the name it was allowed for; internal/egress and the process
	// test cover an allowed TLS tunnel).
	target := w.url("example.internal")
	out, _ = run(t, g, th, httpVia("127.0.0.1:3128", "GET", target, "example.internal"))
	if !strings.Contains(out, "200 OK") || !strings.Contains(out, originBody) {
		t.Fatalf("allowed domain through the proxy:\n%s", out)
	}
	hostport := "example.internal:" + strconv.Itoa(w.port)
	served := w.hits.Load()
	out, _ = run(t, g, th, viaNC("127.0.0.1:3128", fmt.Sprintf(`CONNECT %[1]s HTTP/1.1\r\nHost: %[1]s\r\n\r\nGET / HTTP/1.1\r\nHost: example.internal\r\nConnection: close\r\n\r\n`, hostport)))
	if !strings.Contains(out, "200") || strings.Contains(out, originBody) || w.hits.Load() != served {
		t.Fatalf("CONNECT to the allowed domain carrying plain HTTP:\n%s", out)
	}
	for host, reason := range map[string]string{"other.internal": "not_allowed", "loop.internal": "private_address", "meta.internal": "private_address"} {
		out, _ := run(t, g, th, httpVia("127.0.0.1:3128", "GET", w.url(host), host))
		if !strings.Contains(out, "403") || !strings.Contains(out, reason) {
			t.Errorf("%s: want 403 %s, got:\n%s", host, reason, out)
		}
	}
	if w.hits.Load() != served {
		t.Errorf("the origin saw %d requests, want %d: a refused name reached it", w.hits.Load(), served)
	}
	assertEgressDenials(t, g, 4) // three names, one plain-HTTP tunnel

	// Nothing else is reachable: no route to the host's Redis (on every
	// address a container could try: the docker bridge's, the host's own),
	// nor to a port published on all addresses.
	pub, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	go func() { _ = http.Serve(pub, http.NotFoundHandler()) }()
	ru, err := url.Parse(f.redis.URL())
	if err != nil {
		t.Fatal(err)
	}
	redisPort := ru.Port()
	for _, target := range []string{"172.17.0.1 " + redisPort, "172.17.0.1 " + strconv.Itoa(pub.Addr().(*net.TCPAddr).Port), "127.0.0.1 " + redisPort} {
		began := time.Now()
		out, code := run(t, g, th, "echo PING | nc -w 3 "+target+"; echo exit=$?")
		if strings.Contains(out, "PONG") || !strings.Contains(out, "exit=1") || code != 0 {
			t.Errorf("reached %s from the sandbox (or could not tell):\n%s", target, out)
		}
		t.Logf("nc %s from the sandbox: %s after %v", target, strings.TrimSpace(out), time.Since(began).Round(time.Millisecond))
	}
	// Another sandbox: it has no address at all, and its socket dir is not
	// this one's.
	other, _ := run(t, g, "egress-docker-other", "cat /proc/net/dev; ls /run/sandgate")
	if strings.Contains(other, "eth0") {
		t.Errorf("other sandbox has an interface:\n%s", other)
	}
}

// TestDockerEgressOpen: egress open puts the container on the open network
// (inter-container traffic off), from where it reaches the test's server on
// that network's host address directly.
func TestDockerEgressOpen(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	netName := d.prefix + "-open"
	if _, err := d.api.NetworkCreate(ctx, netName, network.CreateOptions{Driver: "bridge",
		Options: map[string]string{"com.docker.network.bridge.enable_icc": "false"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d.removeAll()
		_ = d.api.NetworkRemove(ctx, netName)
	})
	n, err := d.api.NetworkInspect(ctx, netName, network.InspectOptions{})
	if err != nil || len(n.IPAM.Config) == 0 {
		t.Fatalf("inspect %s: %v %+v", netName, err, n.IPAM)
	}
	hostIP := n.IPAM.Config[0].Gateway
	ln, err := net.Listen("tcp", net.JoinHostPort(hostIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write([]byte(originBody)) }))
	}()
	f := d.fleet("--egress", "open", "--docker-open-network", netName)
	g := f.start()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	out, _ := run(t, g, "open-a", httpVia(hostIP+":"+port, "GET", "/", hostIP))
	if !strings.Contains(out, originBody) {
		t.Fatalf("open sandbox did not reach %s:%s directly:\n%s", hostIP, port, out)
	}
	// Two open sandboxes do not reach each other: b listens, a tries.
	run(t, g, "open-b", "nc -l -p 9999 >/dev/null 2>&1 & echo listening")
	b := d.containerOf(g.URL, "open-b")
	bIP := b.NetworkSettings.Networks[netName].IPAddress
	out, _ = run(t, g, "open-a", "echo hi | nc -w 3 "+bIP+" 9999; echo exit=$?")
	if strings.Contains(out, "exit=0") {
		t.Errorf("open sandbox reached another at %s:9999:\n%s", bIP, out)
	}
}
