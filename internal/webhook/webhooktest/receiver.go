// Package webhooktest is a webhook receiver for tests and benchmarks: it
// verifies each delivery's signature with its own HMAC code (not the
// sender's), dedupes by webhook-id as a receiver should, and can be told
// to answer 500.
package webhooktest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Tolerance is how far a delivery's timestamp may be from now.
const Tolerance = 5 * time.Minute

// Receiver is an HTTP server on loopback receiving webhooks.
type Receiver struct {
	srv     *httptest.Server
	key     []byte
	failing atomic.Bool
	mu      sync.Mutex
	got     map[string]int // event id -> deliveries answered 200
	types   map[string]string
	first   map[string]time.Time
	latency []time.Duration // event time to first 200, per event
	refused int             // deliveries answered 500 (retries follow)
	badSig  int
	badID   int
}

// New starts a receiver for secret ("whsec_..."); Close stops it.
func New(secret string) *Receiver {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic("webhooktest: bad secret")
	}
	r := &Receiver{key: key, got: map[string]int{}, types: map[string]string{}, first: map[string]time.Time{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// URL is where it listens.
func (r *Receiver) URL() string { return r.srv.URL + "/hook" }

// Close stops it.
func (r *Receiver) Close() { r.srv.Close() }

// Fail makes it answer 500 (true) or 200 (false) from now on.
func (r *Receiver) Fail(on bool) { r.failing.Store(on) }

// verify is the receiver side of Standard Webhooks, written from the
// specification: HMAC-SHA256 over "id.timestamp.body", base64, any of the
// space-separated "v1,<sig>" values; the timestamp within Tolerance.
func (r *Receiver) verify(h http.Header, body []byte) bool {
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if id == "" || err != nil || time.Since(time.Unix(sec, 0)).Abs() > Tolerance {
		return false
	}
	mac := hmac.New(sha256.New, r.key)
	io.WriteString(mac, id+"."+ts+".")
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(h.Get("webhook-signature")) {
		v, sig, ok := strings.Cut(s, ",")
		got, err := base64.StdEncoding.DecodeString(sig)
		if ok && v == "v1" && err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.verify(req.Header, body) {
		r.badSig++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var ev struct {
		ID   string    `json:"id"`
		Type string    `json:"type"`
		Time time.Time `json:"time"`
	}
	if json.Unmarshal(body, &ev) != nil || ev.ID != req.Header.Get("webhook-id") {
		r.badID++
		http.Error(w, "id mismatch", http.StatusBadRequest)
		return
	}
	if r.failing.Load() {
		r.refused++
		http.Error(w, "failing on purpose", http.StatusInternalServerError)
		return
	}
	if r.got[ev.ID] == 0 {
		r.first[ev.ID] = time.Now()
		r.latency = append(r.latency, time.Since(ev.Time))
	}
	r.got[ev.ID]++
	r.types[ev.ID] = ev.Type
	w.WriteHeader(http.StatusNoContent)
}

// Counts is what the receiver saw.
type Counts struct {
	// Events: distinct event ids answered 200; Duplicates: further 200s
	// of an id already answered (each carries that same id).
	Events, Duplicates int
	// Refused: deliveries answered 500; BadSignature: refused as
	// unsigned or wrongly signed; BadID: webhook-id not the body's id.
	Refused, BadSignature, BadID int
}

// Counts reports the totals so far.
func (r *Receiver) Counts() Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := Counts{Events: len(r.got), Refused: r.refused, BadSignature: r.badSig, BadID: r.badID}
	for _, n := range r.got {
		c.Duplicates += n - 1
	}
	return c
}

// Has reports whether event id was answered 200, and its type.
func (r *Receiver) Has(id string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.types[id]
	return t, ok
}

// Latencies are, per event, the time from the event to its first 200.
func (r *Receiver) Latencies() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.latency...)
}
