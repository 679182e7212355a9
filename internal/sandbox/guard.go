package sandbox

import (
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// Cross-site request guard. The sandbox API runs commands, and the server
// often listens on loopback, where any page open in the user's browser can
// reach it. A page can send a "simple" cross-origin request (a POST with a
// text/plain or form body) without a CORS preflight, so the server refuses
// what a browser sends on another site's behalf, and JSON endpoints refuse
// bodies not labelled application/json, which a page cannot send
// cross-origin without a preflight the server never approves.

const (
	jsonBody      = "application/json"
	multipartBody = "multipart/form-data"
)

// sameSite refuses, with 403, every request from another site's page before
// it reaches a handler; WebSocket upgrades included.
func (s *Server) sameSite(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if crossSite(r) {
			s.writeError(w, r, statusErr(http.StatusForbidden, "cross-site browser request refused"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// crossSite reports whether a browser sent r on behalf of another site:
// Sec-Fetch-Site says so, or the Origin's host is neither the sandbox's own
// host nor the one a proxy in front forwarded (X-Forwarded-Host, which a
// page cannot set). Clients that are not browsers send neither header and
// pass. The scheme is not compared: a TLS-terminating proxy changes it.
func crossSite(r *http.Request) bool {
	if strings.EqualFold(r.Header.Get("Sec-Fetch-Site"), "cross-site") {
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" { // includes "Origin: null"
		return true
	}
	if strings.EqualFold(u.Host, r.Host) {
		return false
	}
	for _, h := range strings.Split(r.Header.Get("X-Forwarded-Host"), ",") {
		if strings.EqualFold(u.Host, strings.TrimSpace(h)) {
			return false
		}
	}
	return true
}

// bodyType admits requests whose Content-Type is mediaType (parameters such as
// charset allowed) and answers 415 to any other or none.
func bodyType(mediaType string, h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		ct := r.Header.Get("Content-Type")
		got, _, err := mime.ParseMediaType(ct)
		switch {
		case err == nil && got == mediaType:
			return h(w, r)
		case ct == "":
			got = "none"
		case err != nil:
			got = "a malformed value"
		}
		return statusErr(http.StatusUnsupportedMediaType, "%s %s needs Content-Type: %s, got %s",
			r.Method, r.URL.Path, mediaType, got)
	}
}

// bodyless admits a POST that takes no body: one that carries one must
// still be JSON, so an HTML form cannot post it.
func bodyless(h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	json := bodyType(jsonBody, h)
	return func(w http.ResponseWriter, r *http.Request) error {
		if r.Header.Get("Content-Type") != "" {
			return json(w, r)
		}
		return h(w, r)
	}
}
