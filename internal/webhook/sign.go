package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks headers (https://www.standardwebhooks.com).
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
	// SecretPrefix starts every secret; the rest is the key in base64.
	SecretPrefix = "whsec_"
	secretBytes  = 24
)

// ErrBadSecret is a secret that is not whsec_ and 24-64 bytes of base64.
var ErrBadSecret = errors.New("secret must be " + SecretPrefix + " followed by 24 to 64 bytes in base64")

// NewSecret makes a random secret.
func NewSecret() string {
	b := make([]byte, secretBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// secretKey is the HMAC key of a secret.
func secretKey(secret string) ([]byte, error) {
	s, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, ErrBadSecret
	}
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(key) < secretBytes || len(key) > 64 {
		return nil, ErrBadSecret
	}
	return key, nil
}

// Sign is the signature header's value for a delivery: "v1," and the
// base64 HMAC-SHA256, keyed by the secret's key, of "id.timestamp.body".
func Sign(key []byte, id string, at time.Time, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write(strconv.AppendInt(nil, at.Unix(), 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// setHeaders signs one attempt: the timestamp is the attempt's, so a
// receiver's tolerance (5 minutes, say) applies to each retry afresh.
func setHeaders(h http.Header, key []byte, id string, at time.Time, body []byte) {
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(HeaderSignature, Sign(key, id, at, body))
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "sandgate-webhooks")
}
