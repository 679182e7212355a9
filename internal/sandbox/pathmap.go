package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Errors of path resolution; handlers turn both into 403.
var (
	ErrPathOutside = errors.New("path is outside the sandbox's mapped directories")
	ErrReadOnly    = errors.New("path is read-only")
)

// PathMap translates between the virtual paths an agent sees and host paths
// (host mode). Matching is component-wise and longest prefix first, so
// /mnt/user-data/workspace2 never matches /mnt/user-data/workspace. The zero
// value (no mappings) is container mode: every path is real and unchanged.
//
// What is guaranteed: every file-call path resolves inside a mapping's host
// root, after cleaning `..` and resolving symlinks of the existing part of
// the path (a symlink leading out of every mapping, or into a read-only one
// for a write, is refused). Not guaranteed: races where a path component is
// swapped for a symlink between the check and the use, and anything a shell
// command does — commands run in a real shell on the host, so host mode
// isolates file calls, not arbitrary commands.
type PathMap struct {
	mounts  []mount    // forward mappings, longest virtual root first
	reverse []rootPair // host -> virtual, longest host root first
	forward []rootPair // virtual -> host, longest virtual root first
	maxHost int        // longest host root, for stream hold-back
}

type mount struct {
	virtual, host, realHost string
	readOnly                bool
}

// rootPair rewrites the root `from` into `to` inside text.
type rootPair struct{ from, to string }

// NewPathMap validates mappings: virtual and host roots must be absolute,
// virtual roots unique.
func NewPathMap(mappings []Mapping) (*PathMap, error) {
	pm := &PathMap{}
	seen := map[string]bool{}
	for _, m := range mappings {
		if !path.IsAbs(m.Virtual) || !filepath.IsAbs(m.Host) {
			return nil, fmt.Errorf("mapping %s=%s: both sides must be absolute paths", m.Virtual, m.Host)
		}
		v, h := path.Clean(m.Virtual), filepath.Clean(m.Host)
		if v == "/" || h == "/" {
			return nil, fmt.Errorf("mapping %s=%s: the filesystem root cannot be mapped", m.Virtual, m.Host)
		}
		if seen[v] {
			return nil, fmt.Errorf("mapping %s: virtual path mapped twice", v)
		}
		seen[v] = true
		real := h
		if r, err := filepath.EvalSymlinks(h); err == nil {
			real = r
		}
		pm.mounts = append(pm.mounts, mount{virtual: v, host: h, realHost: real, readOnly: m.ReadOnly})
	}
	sort.SliceStable(pm.mounts, func(i, j int) bool { return len(pm.mounts[i].virtual) > len(pm.mounts[j].virtual) })
	pm.buildPairs()
	return pm, nil
}

// buildPairs derives the text rewrite tables. Besides each mapping (and its
// symlink-resolved host root), a parent directory shared by two or more
// mappings with the same layout on both sides (e.g. /mnt/user-data over
// workspace, uploads and outputs) is reverse-mapped too, so `cd ..; pwd`
// from the workspace does not print the host data directory.
func (pm *PathMap) buildPairs() {
	hostSeen := map[string]bool{}
	addRev := func(host, virtual string) {
		if !hostSeen[host] {
			hostSeen[host] = true
			pm.reverse = append(pm.reverse, rootPair{from: host, to: virtual})
		}
	}
	type pair struct{ v, h string }
	level := make([]pair, 0, len(pm.mounts))
	for _, m := range pm.mounts {
		pm.forward = append(pm.forward, rootPair{from: m.virtual, to: m.host})
		addRev(m.host, m.virtual)
		addRev(m.realHost, m.virtual)
		level = append(level, pair{m.virtual, m.host})
	}
	for len(level) > 1 {
		children := map[pair]map[string]bool{}
		for _, p := range level {
			parent := pair{path.Dir(p.v), filepath.Dir(p.h)}
			if parent.v == "/" || parent.h == "/" || path.Base(p.v) != filepath.Base(p.h) {
				continue
			}
			if children[parent] == nil {
				children[parent] = map[string]bool{}
			}
			children[parent][p.v] = true
		}
		var next []pair
		for parent, kids := range children {
			if len(kids) >= 2 {
				addRev(parent.h, parent.v)
				next = append(next, parent)
			}
		}
		level = next
	}
	sort.SliceStable(pm.forward, func(i, j int) bool { return len(pm.forward[i].from) > len(pm.forward[j].from) })
	sort.SliceStable(pm.reverse, func(i, j int) bool { return len(pm.reverse[i].from) > len(pm.reverse[j].from) })
	for _, r := range pm.reverse {
		pm.maxHost = max(pm.maxHost, len(r.from))
	}
}

// Enabled reports host mode (at least one mapping).
func (pm *PathMap) Enabled() bool { return pm != nil && len(pm.mounts) > 0 }

// within reports whether p is root or below it (component-wise) and returns
// the remainder ("" or starting with "/").
func within(p, root string) (string, bool) {
	switch {
	case p == root:
		return "", true
	case strings.HasPrefix(p, root) && p[len(root)] == '/':
		return p[len(root):], true
	}
	return "", false
}

// ToHost maps a virtual path lexically (after cleaning) to its host path.
// In container mode the cleaned path is returned unchanged.
func (pm *PathMap) ToHost(virtual string) (host string, readOnly bool, err error) {
	if !path.IsAbs(virtual) {
		return "", false, fmt.Errorf("%q: %w", virtual, ErrPathOutside)
	}
	p := path.Clean(virtual)
	if !pm.Enabled() {
		return p, false, nil
	}
	for _, m := range pm.mounts {
		if rest, ok := within(p, m.virtual); ok {
			return m.host + rest, m.readOnly, nil
		}
	}
	return "", false, ErrPathOutside
}

// ToVirtual maps a host path inside a mapping back to its virtual path.
func (pm *PathMap) ToVirtual(host string) (string, bool) {
	p := filepath.Clean(host)
	if !pm.Enabled() {
		return p, true
	}
	for _, r := range pm.reverse {
		if rest, ok := within(p, r.from); ok {
			return r.to + rest, true
		}
	}
	return "", false
}

// Resolve maps a virtual path to a host path and checks, through symlinks
// of the existing part of the path, that the target stays inside a mapping.
// readOnly is true if either the virtual mapping or the mapping the symlinks
// lead into is read-only.
func (pm *PathMap) Resolve(virtual string) (host string, readOnly bool, err error) {
	host, readOnly, err = pm.ToHost(virtual)
	if err != nil || !pm.Enabled() {
		return host, readOnly, err
	}
	real, err := evalExisting(host)
	if err != nil {
		return "", false, err
	}
	for _, m := range pm.mounts {
		if _, ok := within(real, m.realHost); ok {
			return host, readOnly || m.readOnly, nil
		}
	}
	return "", false, ErrPathOutside
}

// evalExisting resolves symlinks of the longest existing prefix of p and
// appends the rest. A dangling symlink is refused: writing through it would
// land wherever it points.
func evalExisting(p string) (string, error) {
	var rest []string
	for {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			for i := len(rest) - 1; i >= 0; i-- {
				real = filepath.Join(real, rest[i])
			}
			return real, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if _, lerr := os.Lstat(p); lerr == nil {
			return "", fmt.Errorf("dangling symlink: %w", ErrPathOutside)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", err
		}
		rest = append(rest, filepath.Base(p))
		p = parent
	}
}

// MapCommand rewrites virtual roots appearing in command text (at path
// boundaries) to host roots.
func (pm *PathMap) MapCommand(text string) string {
	if !pm.Enabled() {
		return text
	}
	return string(rewriteRoots(nil, []byte(text), 0, pm.forward))
}

// Unmap rewrites host roots appearing in text back to virtual roots.
func (pm *PathMap) Unmap(text string) string {
	if !pm.Enabled() {
		return text
	}
	return string(rewriteRoots(nil, []byte(text), 0, pm.reverse))
}

// isNameChar is a byte that continues a path component.
func isNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '-' || c == '.' || c == '~'
}

// rootEndsAt reports whether a path component may end at s[i]. A single
// trailing dot counts as punctuation ("saved to /x/outputs.") so a host root
// at the end of a sentence is still rewritten; "/x/outputs.bak" is not.
func rootEndsAt(s []byte, i int) bool {
	switch {
	case i == len(s) || !isNameChar(s[i]):
		return true
	case s[i] == '.':
		return i+1 == len(s) || !isNameChar(s[i+1])
	}
	return false
}

// rootStartsAt reports whether a path may start at s[i]: the byte before it
// is not part of a path.
func rootStartsAt(s []byte, i int) bool {
	return i == 0 || !(isNameChar(s[i-1]) || s[i-1] == '/')
}

// rewriteRoots appends s[from:] to dst with every root occurrence replaced.
// Bytes before `from` are context only (for the boundary check).
func rewriteRoots(dst, s []byte, from int, pairs []rootPair) []byte {
	last := from
	for i := from; i < len(s); i++ {
		if s[i] != '/' || !rootStartsAt(s, i) {
			continue
		}
		for _, p := range pairs {
			end := i + len(p.from)
			if end > len(s) || string(s[i:end]) != p.from {
				continue
			}
			if !rootEndsAt(s, end) {
				continue
			}
			dst = append(dst, s[last:i]...)
			dst = append(dst, p.to...)
			last, i = end, end-1
			break
		}
	}
	return append(dst, s[last:]...)
}

// unmapper reverse-maps a byte stream chunk by chunk. It holds back a tail
// that could be the start of a host root split across chunks, so a host
// path is never emitted half-rewritten.
type unmapper struct {
	pm      *PathMap
	pending []byte
	prev    byte // last emitted byte, for the boundary check
	started bool
}

func (u *unmapper) feed(p []byte) []byte {
	if !u.pm.Enabled() {
		return p
	}
	data := make([]byte, 0, 1+len(u.pending)+len(p))
	ctx := 0
	if u.started {
		data, ctx = append(data, u.prev), 1
	}
	data = append(append(data, u.pending...), p...)
	k := u.holdIndex(data, ctx)
	out := rewriteRoots(nil, data[:k], ctx, u.pm.reverse)
	u.pending = append(u.pending[:0], data[k:]...)
	if k > ctx {
		u.prev, u.started = data[k-1], true
	}
	return out
}

// holdIndex is the earliest index from which data could still become a host
// root once more bytes arrive: a prefix of a root, or a root and a dot.
func (u *unmapper) holdIndex(data []byte, ctx int) int {
	for j := max(ctx, len(data)-u.pm.maxHost-1); j < len(data); j++ {
		if data[j] != '/' || !rootStartsAt(data, j) {
			continue
		}
		tail := string(data[j:])
		for _, r := range u.pm.reverse {
			if len(tail) <= len(r.from) && r.from[:len(tail)] == tail || tail == r.from+"." {
				return j
			}
		}
	}
	return len(data)
}

func (u *unmapper) flush() []byte {
	if len(u.pending) == 0 {
		return nil
	}
	data := make([]byte, 0, 1+len(u.pending))
	ctx := 0
	if u.started {
		data, ctx = append(data, u.prev), 1
	}
	data = append(data, u.pending...)
	out := rewriteRoots(nil, data, ctx, u.pm.reverse)
	u.prev, u.started = data[len(data)-1], true
	u.pending = u.pending[:0]
	return out
}
