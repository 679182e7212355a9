package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
)

// pattern is n bytes that differ per seed, so a body read through a buffer
// another exchange overwrote shows up as wrong bytes.
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + (seed+i/7)%26)
	}
	return b
}

// patternServer answers /p?seed=S&n=N with pattern(S, N), written in small
// pieces so that the body spans many reads of the gateway's buffer.
func patternServer(t *testing.T) *upstream {
	return newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seed, _ := strconv.Atoi(r.URL.Query().Get("seed"))
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		body := pattern(seed, n)
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for len(body) > 0 {
			k := min(len(body), 1000)
			_, _ = w.Write(body[:k])
			w.(http.Flusher).Flush()
			body = body[k:]
		}
	}))
}

func get(t *testing.T, tr *Transport, base string, seed, n int) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/p?seed=%d&n=%d", base, seed, n), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A response still being read keeps its connection's buffers: exchanges
// that finish meanwhile return theirs to the pools and take them again, and
// none of them may be the half-read response's.
func TestPooledBuffersNotReusedWhileResponseIsRead(t *testing.T) {
	t.Parallel()
	up := patternServer(t)
	tr := NewTransport(TransportConfig{})
	t.Cleanup(tr.CloseIdleConnections)

	const n = 64 << 10
	slow := get(t, tr, up.URL, 1, n)
	first := make([]byte, 100) // less than what the first read buffered
	if _, err := io.ReadFull(slow.Body, first); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 20 {
				seed := 2 + g*20 + i
				resp := get(t, tr, up.URL, seed, 5000)
				got, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if err != nil || !bytes.Equal(got, pattern(seed, 5000)) {
					t.Errorf("concurrent exchange %d: %v, body corrupted: %v", seed, err, !bytes.Equal(got, pattern(seed, 5000)))
				}
			}
		})
	}
	wg.Wait()
	rest, err := io.ReadAll(slow.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got := append(first, rest...); !bytes.Equal(got, pattern(1, n)) {
		t.Fatalf("the response read across other exchanges was corrupted (%d bytes)", len(got))
	}
}

// An idle connection holds no buffer (they are most of an idle
// connection's memory), and takes them again for its next exchange.
func TestIdleConnectionHoldsNoBuffers(t *testing.T) {
	t.Parallel()
	up := patternServer(t)
	tr := NewTransport(TransportConfig{})
	t.Cleanup(tr.CloseIdleConnections)
	for seed := range 3 {
		resp := get(t, tr, up.URL, seed, 6000)
		got, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || !bytes.Equal(got, pattern(seed, 6000)) {
			t.Fatalf("exchange %d: %v", seed, err)
		}
		tr.mu.Lock()
		if len(tr.idle) != 1 {
			t.Fatalf("%d idle connections, want 1", len(tr.idle))
		}
		if c := tr.idle[0]; c.br != nil || c.bw != nil {
			t.Fatal("an idle connection kept its buffers")
		}
		tr.mu.Unlock()
	}
	if n := up.conns.Load(); n != 1 {
		t.Fatalf("%d upstream connections, want 1 reused", n)
	}
}
