package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/sync/singleflight"
)

// A JWKS client small enough to read: RSA and P-256 keys, fetched with a
// timeout and a size cap, cached, refreshed hourly in the background and at
// once (at most every jwksMinRefresh) when a token names an unknown kid, so
// an issuer's key rotation needs no restart. A library (lestrrat-go/jwx)
// would bring a second JWT stack beside golang-jwt for these ~150 lines.
const (
	jwksMaxAge       = time.Hour
	jwksMinRefresh   = 30 * time.Second
	jwksFetchLimit   = 1 << 20
	jwksFetchTimeout = 5 * time.Second
	minRSABits       = 2048
)

type jwks struct {
	url    string
	client *http.Client
	log    *slog.Logger
	now    func() time.Time
	// minRefresh spaces fetches caused by unknown kids: a flood of tokens
	// with made-up kids costs at most one fetch per interval.
	minRefresh time.Duration
	set        atomic.Pointer[jwkSet]
	lastTry    atomic.Int64 // unix nanos of the last fetch attempt
	background atomic.Bool
	flight     singleflight.Group
}

type jwkSet struct {
	keys    []jwk
	fetched time.Time
}

type jwk struct {
	kid, alg string
	key      any
}

func newJWKS(url string, log *slog.Logger) *jwks {
	return &jwks{
		url: url,
		client: &http.Client{Transport: &http.Transport{
			Proxy:       http.ProxyFromEnvironment,
			DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		}},
		log:        log,
		now:        time.Now,
		minRefresh: jwksMinRefresh,
	}
}

// key returns the key for (kid, alg); a token without kid may be signed by
// any key of its alg.
func (j *jwks) key(kid, alg string) (any, error) {
	set := j.set.Load()
	if k, ok := set.find(kid, alg); ok {
		if j.now().Sub(set.fetched) > jwksMaxAge {
			j.refreshInBackground()
		}
		return k, nil
	}
	if j.mayFetch() {
		ctx, cancel := context.WithTimeout(context.Background(), jwksFetchTimeout)
		defer cancel()
		if err := j.refresh(ctx); err != nil {
			return nil, err
		}
		if k, ok := j.set.Load().find(kid, alg); ok {
			return k, nil
		}
	}
	return nil, fmt.Errorf("no JWKS key with kid %q for %s", kid, alg)
}

func (j *jwks) mayFetch() bool {
	return j.now().Sub(time.Unix(0, j.lastTry.Load())) >= j.minRefresh
}

func (j *jwks) refreshInBackground() {
	if !j.mayFetch() || !j.background.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer j.background.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), jwksFetchTimeout)
		defer cancel()
		if err := j.refresh(ctx); err != nil {
			j.log.Warn("auth: JWKS refresh failed; keeping the cached keys", "err", err)
		}
	}()
}

// refresh fetches the set once for all concurrent callers; a failed fetch
// keeps the cached keys.
func (j *jwks) refresh(ctx context.Context) error {
	_, err, _ := j.flight.Do("jwks", func() (any, error) {
		j.lastTry.Store(j.now().UnixNano())
		keys, err := j.fetch(ctx)
		if err != nil {
			return nil, err
		}
		j.set.Store(&jwkSet{keys: keys, fetched: j.now()})
		return nil, nil
	})
	return err
}

func (j *jwks) fetch(ctx context.Context) ([]jwk, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.url, nil)
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := j.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jwks: %s answered %d", j.url, resp.StatusCode)
	}
	var doc struct {
		Keys []rawJWK `json:"keys"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, jwksFetchLimit)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("jwks: decode: %w", err)
	}
	var keys []jwk
	for _, raw := range doc.Keys {
		k, err := raw.parse()
		if err != nil {
			j.log.Debug("auth: JWKS key skipped", "kid", raw.Kid, "err", err)
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("jwks: no usable RS256 or ES256 key")
	}
	return keys, nil
}

// find returns the key for (kid, alg); without kid, every key of alg (the
// parser tries each).
func (s *jwkSet) find(kid, alg string) (any, bool) {
	if s == nil {
		return nil, false
	}
	if kid == "" {
		var set jwt.VerificationKeySet
		for _, k := range s.keys {
			if k.alg == alg {
				set.Keys = append(set.Keys, k.key)
			}
		}
		return set, len(set.Keys) > 0
	}
	for _, k := range s.keys {
		if k.kid == kid && k.alg == alg {
			return k.key, true
		}
	}
	return nil, false
}

type rawJWK struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

func (r rawJWK) parse() (jwk, error) {
	if r.Use != "" && r.Use != "sig" {
		return jwk{}, fmt.Errorf("use %q", r.Use)
	}
	var key any
	var alg string
	switch r.Kty {
	case "RSA":
		n, err1 := b64(r.N)
		e, err2 := b64(r.E)
		if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
			return jwk{}, errors.New("bad RSA n or e")
		}
		exp := new(big.Int).SetBytes(e)
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(exp.Int64())}
		key, alg = pub, algRS256
	case "EC":
		if r.Crv != "P-256" {
			return jwk{}, fmt.Errorf("curve %q", r.Crv)
		}
		x, err1 := b64(r.X)
		y, err2 := b64(r.Y)
		if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
			return jwk{}, errors.New("bad EC x or y")
		}
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return jwk{}, err
		}
		key, alg = pub, algES256
	default:
		return jwk{}, fmt.Errorf("kty %q", r.Kty)
	}
	if _, err := keyAlg(key); err != nil {
		return jwk{}, err
	}
	if r.Alg != "" && r.Alg != alg {
		return jwk{}, fmt.Errorf("alg %q on a %s key", r.Alg, r.Kty)
	}
	return jwk{kid: r.Kid, alg: alg, key: key}, nil
}

// b64 decodes base64url with or without padding.
func b64(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// readPublicKey reads a PEM public key or certificate and returns the key
// with the one alg it verifies.
func readPublicKey(file string) (any, string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, "", err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, "", errors.New("no PEM block")
	}
	var key any
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			key = cert.PublicKey
		}
	default:
		return nil, "", fmt.Errorf("PEM block %q: want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE", block.Type)
	}
	if err != nil {
		return nil, "", err
	}
	alg, err := keyAlg(key)
	return key, alg, err
}

// keyAlg pins a key to its alg: RSA (2048 bits or more) is RS256, ECDSA
// P-256 is ES256; nothing else is accepted.
func keyAlg(key any) (string, error) {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits || k.E < 3 || k.E%2 == 0 {
			return "", fmt.Errorf("RSA key of %d bits (or a bad exponent): want %d or more", k.N.BitLen(), minRSABits)
		}
		return algRS256, nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return "", errors.New("ECDSA key not on P-256")
		}
		return algES256, nil
	}
	return "", fmt.Errorf("unsupported key type %T (want RSA or ECDSA P-256)", key)
}
