// Package preview holds preview links: signed, expiring credentials that
// open one port of one sandbox incarnation to whoever holds them, with no
// other credential. A link is self-contained: it names the sandbox, the
// port, its expiry, its own id and the fleet key that signed it, and its
// signature (HMAC-SHA256) also covers the incarnation, which the link does
// not carry: the verifier takes it from the route cache, so a recreated
// sandbox (a new incarnation) fails every old link without any bookkeeping.
// Verification is a parse, two map reads and two SHA-256 runs: no Redis, no
// allocation. The package is a leaf: the Redis side (keys, revocations,
// their pub/sub) lives in statedb, the routes in router.
package preview

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
)

// Layout of a link's bytes, before encoding. Fixed-size fields, so the
// signed message needs no separators.
const (
	keyIDLen = 2
	sidLen   = 8 // identity.SandboxID is 16 hex digits
	portLen  = 2
	expLen   = 4 // unix seconds, good until 2106
	// IDLen is the length of a link's id: random, the handle the owner
	// lists and revokes a link by (never a credential on its own).
	IDLen = 6
	// MACLen is the signature kept: 128 bits of HMAC-SHA256.
	MACLen   = 16
	fieldLen = keyIDLen + sidLen + portLen + expLen + IDLen
	rawLen   = fieldLen + MACLen
	// TokenLen is the length of an encoded link: 61 characters of
	// lowercase base32, so it fits one DNS label (63) of the host form.
	TokenLen = (rawLen*8 + 4) / 5
)

// alphabet is RFC 4648 base32 in lowercase: host names are
// case-insensitive and browsers lowercase them.
const alphabet = "abcdefghijklmnopqrstuvwxyz234567"

var encoding = base32.NewEncoding(alphabet).WithPadding(base32.NoPadding)

// decodeTable maps a character to its 5 bits; 0xff = not in the alphabet.
// Upper case decodes too (a Host header typed by hand).
var decodeTable = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = byte(i)
		if c := alphabet[i]; 'a' <= c && c <= 'z' {
			t[c-'a'+'A'] = byte(i)
		}
	}
	return t
}()

// Link is what a preview link says, signature aside.
type Link struct {
	KeyID     uint16
	SandboxID [sidLen]byte
	Port      uint16
	Expires   uint32 // unix seconds
	ID        [IDLen]byte
}

// MAC is a link's signature.
type MAC [MACLen]byte

// SandboxHex writes the sandbox id in its usual form (16 hex digits) into
// dst, which the caller keeps on its stack.
func (l *Link) SandboxHex(dst *[2 * sidLen]byte) {
	hex.Encode(dst[:], l.SandboxID[:])
}

// IDString is the link's id as the API shows it (12 hex digits).
func (l *Link) IDString() string { return hex.EncodeToString(l.ID[:]) }

// ParseID reads an id IDString wrote.
func ParseID(s string) ([IDLen]byte, bool) {
	var id [IDLen]byte
	if len(s) != 2*IDLen {
		return id, false
	}
	_, err := hex.Decode(id[:], []byte(s))
	return id, err == nil
}

// ParseSandboxID reads a sandbox id (16 hex digits) into a link's form.
func ParseSandboxID(s string) ([sidLen]byte, bool) {
	var sid [sidLen]byte
	if len(s) != 2*sidLen {
		return sid, false
	}
	_, err := hex.Decode(sid[:], []byte(s))
	return sid, err == nil
}

func (l *Link) fields(b *[fieldLen]byte) {
	binary.BigEndian.PutUint16(b[0:], l.KeyID)
	copy(b[2:], l.SandboxID[:])
	binary.BigEndian.PutUint16(b[10:], l.Port)
	binary.BigEndian.PutUint32(b[12:], l.Expires)
	copy(b[16:], l.ID[:])
}

// Parse decodes a token without allocating. ok is false for anything that
// is not exactly TokenLen characters of the alphabet with zero padding
// bits (so a link has one spelling, case aside). It checks the form only:
// the signature is Keyring.Verify's business.
func Parse(tok string) (l Link, mac MAC, ok bool) {
	if len(tok) != TokenLen {
		return l, mac, false
	}
	var raw [rawLen]byte
	var acc uint64
	bits, n := 0, 0
	for i := 0; i < len(tok); i++ {
		v := decodeTable[tok[i]]
		if v == 0xff {
			return l, mac, false
		}
		acc = acc<<5 | uint64(v)
		bits += 5
		if bits >= 8 {
			bits -= 8
			raw[n] = byte(acc >> bits)
			n++
		}
	}
	if acc&(1<<bits-1) != 0 { // padding bits: a second spelling of the same bytes
		return l, mac, false
	}
	l.KeyID = binary.BigEndian.Uint16(raw[0:])
	copy(l.SandboxID[:], raw[2:10])
	l.Port = binary.BigEndian.Uint16(raw[10:])
	l.Expires = binary.BigEndian.Uint32(raw[12:])
	copy(l.ID[:], raw[16:fieldLen])
	copy(mac[:], raw[fieldLen:])
	return l, mac, true
}

// Key is one fleet key, with its HMAC pads computed once.
type Key struct {
	ipad, opad [sha256.BlockSize]byte
}

// NewKey prepares secret (32 random bytes; longer is hashed, per HMAC).
func NewKey(secret []byte) *Key {
	if len(secret) > sha256.BlockSize {
		s := sha256.Sum256(secret)
		secret = s[:]
	}
	k := &Key{}
	for i := range k.ipad {
		var b byte
		if i < len(secret) {
			b = secret[i]
		}
		k.ipad[i], k.opad[i] = b^0x36, b^0x5c
	}
	return k
}

// maxIncarnation bounds the incarnation signed as is (docker's 64-digit
// container ids, Pod uids, pid:start); a longer one is signed by its
// SHA-256, which keeps the message on the stack.
const maxIncarnation = 128

// mac is HMAC-SHA256(key, fields || incarnation) truncated to MACLen,
// written out over stack buffers (crypto/hmac allocates its state).
func (k *Key) mac(l *Link, incarnation string) MAC {
	var msg [sha256.BlockSize + fieldLen + maxIncarnation]byte
	copy(msg[:], k.ipad[:])
	var f [fieldLen]byte
	l.fields(&f)
	copy(msg[sha256.BlockSize:], f[:])
	n := sha256.BlockSize + fieldLen
	if len(incarnation) > maxIncarnation {
		sum := sha256.Sum256([]byte(incarnation))
		n += copy(msg[n:], sum[:])
	} else {
		n += copy(msg[n:], incarnation)
	}
	inner := sha256.Sum256(msg[:n])
	var outer [sha256.BlockSize + sha256.Size]byte
	copy(outer[:], k.opad[:])
	copy(outer[sha256.BlockSize:], inner[:])
	full := sha256.Sum256(outer[:])
	var m MAC
	copy(m[:], full[:])
	return m
}

// Sign encodes l with its signature under k for incarnation.
func (k *Key) Sign(l Link, incarnation string) string {
	var raw [rawLen]byte
	var f [fieldLen]byte
	l.fields(&f)
	copy(raw[:], f[:])
	m := k.mac(&l, incarnation)
	copy(raw[fieldLen:], m[:])
	return encoding.EncodeToString(raw[:])
}

// verify compares in constant time: the timing says nothing about how
// much of a forged signature was right.
func (k *Key) verify(l *Link, mac MAC, incarnation string) bool {
	want := k.mac(l, incarnation)
	return subtle.ConstantTimeCompare(want[:], mac[:]) == 1
}
