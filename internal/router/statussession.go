package router

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/state"
)

// A status-page login is an opaque session: the cookie holds 32 random
// bytes, never the credential. Redis holds, under the SHA-256 of the id
// (statedb.Store), the credential sealed with a key derived from the id, so
// neither the cookie nor Redis alone yields the credential, every replica
// accepts the session, and each request re-checks the credential (a
// removed API key or an expired JWT ends its sessions). Logout and revoke
// delete the record; its TTL is the session's expiry.

// sessionID is a session's secret id; its cookie form is unpadded base64url.
type sessionID [32]byte

const sessionCookieLen = 43 // base64url of 32 bytes

var errBadSession = fmt.Errorf("%w: unknown, expired or revoked status session", auth.ErrUnauthenticated)

func newSessionID() (sessionID, error) {
	var id sessionID
	_, err := rand.Read(id[:])
	return id, err
}

func parseSessionID(v string) (sessionID, bool) {
	var id sessionID
	if len(v) != sessionCookieLen {
		return id, false
	}
	n, err := base64.RawURLEncoding.Decode(id[:], []byte(v))
	return id, err == nil && n == len(id)
}

func (id sessionID) String() string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// derive is SHA-256 of a purpose label and the id: the index and the
// sealing key are independent one-way functions of the id.
func (id sessionID) derive(label string) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte("sandgate status session " + label + "\x00"))
	h.Write(id[:])
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// sum is the session's index in the store.
func (id sessionID) sum() string { s := id.derive("index"); return hex.EncodeToString(s[:]) }

func (id sessionID) aead() cipher.AEAD {
	key := id.derive("key")
	block, _ := aes.NewCipher(key[:]) // a 32-byte key never fails
	gcm, _ := cipher.NewGCM(block)
	return gcm
}

// seal encrypts cred under the id, bound to the session's index.
func (id sessionID) seal(cred string) ([]byte, error) {
	gcm := id.aead()
	nonce := make([]byte, gcm.NonceSize(), gcm.NonceSize()+len(cred)+gcm.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return gcm.Seal(nonce, nonce, []byte(cred), []byte(id.sum())), nil
}

func (id sessionID) open(sealed []byte) (string, error) {
	gcm := id.aead()
	if len(sealed) < gcm.NonceSize() {
		return "", errBadSession
	}
	cred, err := gcm.Open(nil, sealed[:gcm.NonceSize()], sealed[gcm.NonceSize():], []byte(id.sum()))
	if err != nil {
		return "", errBadSession
	}
	return string(cred), nil
}

// session authenticates r by its session cookie; ok is false without one.
func (s *statusPage) session(r *http.Request) (p *auth.Principal, id sessionID, ok bool, err error) {
	ck, err := r.Cookie(statusCookie)
	if err != nil {
		return nil, id, false, nil
	}
	id, valid := parseSessionID(ck.Value)
	if !valid {
		return nil, id, true, errBadSession
	}
	ctx, cancel := context.WithTimeout(r.Context(), statusTimeout)
	defer cancel()
	sealed, err := s.cfg.Sessions.Session(ctx, id.sum())
	if errors.Is(err, state.ErrNoSession) {
		return nil, id, true, errBadSession
	}
	if err != nil {
		return nil, id, true, stateErr(err)
	}
	cred, err := id.open(sealed)
	if err != nil {
		return nil, id, true, err
	}
	p, err = s.rt.auth.Authenticate(&http.Request{Header: http.Header{"Authorization": {"Bearer " + cred}}}, false)
	return p, id, true, err
}

// startSession stores a session for p's credential and sets its cookie.
func (s *statusPage) startSession(c echo.Context, p *auth.Principal, cred string) error {
	id, err := newSessionID()
	if err != nil {
		return err
	}
	sealed, err := id.seal(cred)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), statusTimeout)
	defer cancel()
	if err := s.cfg.Sessions.PutSession(ctx, id.sum(), p.User, sealed, statusCookieAge); err != nil {
		return stateErr(err)
	}
	http.SetCookie(c.Response(), s.cookie(c.Request(), id.String(), int(statusCookieAge/time.Second)))
	dropLegacyCookie(c.Response())
	return nil
}

// dropLegacyCookie expires the login cookie of earlier versions (Path=/,
// the credential itself), which browsers would otherwise keep sending to
// every path of the gateway, sandboxes' included, until it expires.
func dropLegacyCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: statusCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

// cookie is the session cookie: sent to the status routes only (never to
// a sandbox's /threads/... path), never to script, never cross-site, and
// over HTTPS only unless the gateway listens on plain loopback HTTP.
func (s *statusPage) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: statusCookie, Value: value, Path: statusPath, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: !s.cfg.PlainLoopback || r.TLS != nil || strings.HasPrefix(s.rt.public, "https://"),
	}
}
