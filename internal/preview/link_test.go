package preview

import (
	"crypto/hmac"
	"crypto/sha256"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	secret = []byte("0123456789abcdef0123456789abcdef")
	now    = time.Unix(1_800_000_000, 0)
)

func aliceLink() Link {
	return Link{KeyID: 1, SandboxID: [8]byte{0xa1, 0x1c, 0xe0, 0, 0, 0, 0, 1}, Port: 3000,
		Expires: uint32(now.Add(time.Hour).Unix()), ID: [IDLen]byte{1, 2, 3, 4, 5, 6}}
}

func links(t *testing.T) *Links {
	t.Helper()
	ls := &Links{}
	ls.Keys.Replace(1, map[uint16]*Key{1: NewKey(secret)})
	return ls
}

// verify is the whole check a replica makes, with incarnation standing in
// for what its route cache says of the link's sandbox.
func verify(ls *Links, tok, incarnation string) (Link, bool) {
	l, mac, ok := ls.Check(tok, now)
	return l, ok && ls.Keys.Verify(&l, mac, incarnation)
}

// The signature is HMAC-SHA256 as crypto/hmac computes it, truncated.
func TestMACIsHMACSHA256(t *testing.T) {
	t.Parallel()
	for _, inc := range []string{"", "pid:1234:5678", strings.Repeat("c", 64), strings.Repeat("long", 100)} {
		l := aliceLink()
		var f [fieldLen]byte
		l.fields(&f)
		signed := inc
		if len(inc) > maxIncarnation {
			sum := sha256.Sum256([]byte(inc))
			signed = string(sum[:])
		}
		h := hmac.New(sha256.New, secret)
		h.Write(f[:])
		h.Write([]byte(signed))
		got := NewKey(secret).mac(&l, inc)
		if want := h.Sum(nil)[:MACLen]; string(got[:]) != string(want) {
			t.Errorf("incarnation of %d bytes: mac %x, want %x", len(inc), got, want)
		}
	}
}

// Every forgery an attacker holding one link of alice's can try, and the
// links that must no longer open: each must fail, and the genuine one
// must pass (so the table cannot pass by refusing everything).
func TestVerifyRefusesForgeries(t *testing.T) {
	t.Parallel()
	ls := links(t)
	key := NewKey(secret)
	const inc = "incarnation-1"
	genuine := key.Sign(aliceLink(), inc)
	if len(genuine) != TokenLen || strings.ToLower(genuine) != genuine {
		t.Fatalf("token %q: want %d lowercase characters", genuine, TokenLen)
	}
	if l, ok := verify(ls, genuine, inc); !ok || l != aliceLink() {
		t.Fatalf("the genuine link does not verify: %+v %v", l, ok)
	}
	if _, ok := verify(ls, strings.ToUpper(genuine), inc); !ok {
		t.Error("the genuine link in upper case (a Host typed by hand) does not verify")
	}
	// resign re-encodes alice's signature over changed fields: what an
	// attacker can produce without the key.
	resign := func(change func(*Link)) string {
		l, mac, _ := Parse(genuine)
		change(&l)
		var raw [rawLen]byte
		var f [fieldLen]byte
		l.fields(&f)
		copy(raw[:], f[:])
		copy(raw[fieldLen:], mac[:])
		return encoding.EncodeToString(raw[:])
	}
	expired := aliceLink()
	expired.Expires = uint32(now.Unix())
	revoked := aliceLink()
	revoked.ID = [IDLen]byte{9, 9, 9, 9, 9, 9}
	ls.Revoked.Add(revoked.ID, revoked.Expires, now)
	other := NewKey([]byte("another fleet's key, not this one"))
	flip := []byte(genuine)
	flip[len(flip)-3] = map[bool]byte{true: 'b', false: 'a'}[flip[len(flip)-3] == 'a']
	for _, c := range []struct{ name, tok, inc string }{
		{"swapped sandbox id (bob's)", resign(func(l *Link) { l.SandboxID[7] = 2 }), inc},
		{"changed port", resign(func(l *Link) { l.Port = 3001 }), inc},
		{"extended expiry", resign(func(l *Link) { l.Expires += 3600 }), inc},
		{"another link id", resign(func(l *Link) { l.ID[0] ^= 1 }), inc},
		{"another key id", resign(func(l *Link) { l.KeyID = 2 }), inc},
		{"truncated signature", genuine[:TokenLen-2], inc},
		{"signature cut to nothing", genuine[:TokenLen-MACLen*8/5], inc},
		{"one signature character changed", string(flip), inc},
		{"extra character", genuine + "a", inc},
		{"padding bits set", genuine[:TokenLen-1] + "b", inc},
		{"not base32", genuine[:TokenLen-1] + "!", inc},
		{"empty", "", inc},
		{"recreated sandbox (new incarnation)", genuine, "incarnation-2"},
		{"signed with another key", other.Sign(aliceLink(), inc), inc},
		{"expired", key.Sign(expired, inc), inc},
		{"revoked", key.Sign(revoked, inc), inc},
		{"port 0", key.Sign(func() Link { l := aliceLink(); l.Port = 0; return l }(), inc), inc},
	} {
		if _, ok := verify(ls, c.tok, c.inc); ok {
			t.Errorf("%s: verified", c.name)
		}
	}
	// Before the keys are loaded nothing verifies.
	if _, ok := verify(&Links{}, genuine, inc); ok {
		t.Error("verified without keys")
	}
}

// A rotated-out key keeps verifying its links; a retired one does not.
func TestRotationKeepsOldLinks(t *testing.T) {
	t.Parallel()
	ls := links(t)
	old := NewKey(secret).Sign(aliceLink(), "i")
	ls.Keys.Replace(2, map[uint16]*Key{1: NewKey(secret), 2: NewKey([]byte("the next key, 32 bytes long....."))})
	if _, ok := verify(ls, old, "i"); !ok {
		t.Error("a link of the rotated-out key stopped verifying")
	}
	id, k, ok := ls.Keys.Current()
	if !ok || id != 2 {
		t.Fatalf("current key %d %v, want 2", id, ok)
	}
	l := aliceLink()
	l.KeyID = id
	if _, ok := verify(ls, k.Sign(l, "i"), "i"); !ok {
		t.Error("a link of the new key does not verify")
	}
	ls.Keys.Replace(2, map[uint16]*Key{2: NewKey([]byte("the next key, 32 bytes long....."))})
	if _, ok := verify(ls, old, "i"); ok {
		t.Error("a link of a retired key still verifies")
	}
}

// Revocations are forgotten once their links would have expired.
func TestRevokedForgetsExpired(t *testing.T) {
	t.Parallel()
	var r Revoked
	a, b := [IDLen]byte{1}, [IDLen]byte{2}
	r.Add(a, uint32(now.Unix())+1, now)
	r.Add(b, uint32(now.Unix())+100, now.Add(2*time.Second))
	if r.Has(a) || !r.Has(b) {
		t.Errorf("has a=%v (expired: want false) b=%v (want true)", r.Has(a), r.Has(b))
	}
}

// Parsing and checking a link allocates nothing (it runs per request).
func TestCheckDoesNotAllocate(t *testing.T) {
	ls := links(t)
	tok := NewKey(secret).Sign(aliceLink(), "i")
	if allocs := testing.AllocsPerRun(1000, func() {
		if _, ok := verify(ls, tok, "i"); !ok {
			t.Fatal("refused")
		}
	}); allocs != 0 {
		t.Errorf("verify allocates %.1f times", allocs)
	}
}

var portSink string

// A link's port reads as strconv.Itoa would write it, on both sides of
// the table's bound, and a port below it costs no allocation.
func TestPortString(t *testing.T) {
	for p := 0; p <= 65535; p++ {
		l := Link{Port: uint16(p)}
		if got := l.PortString(); got != strconv.Itoa(p) {
			t.Fatalf("port %d reads %q", p, got)
		}
	}
	for _, p := range []uint16{1, 80, 3000, 9999} {
		l := Link{Port: p}
		if allocs := testing.AllocsPerRun(1000, func() { portSink = l.PortString() }); allocs != 0 {
			t.Errorf("port %d: %.1f allocations", p, allocs)
		}
	}
}
