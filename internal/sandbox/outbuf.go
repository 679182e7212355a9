package sandbox

import (
	"fmt"
	"sync"
)

// truncMarker replaces the omitted middle of an over-long output. Head and
// tail are both kept: the start shows what ran, the end how it finished.
func truncMarker(omitted int64, unit string) string {
	return fmt.Sprintf("\n...[output truncated: %d %s omitted]...\n", omitted, unit)
}

// signal is a broadcast "something changed" channel: wait returns a channel
// closed by the next fire.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

func (s *signal) fire() {
	s.mu.Lock()
	close(s.ch)
	s.ch = make(chan struct{})
	s.mu.Unlock()
}

// outBuf holds one output stream of a command within a byte budget: the
// first half of the budget as head, the most recent half as a ring-buffer
// tail, and a count of what fell in between. Writes are reverse-mapped
// (host -> virtual paths) before they are stored, so every reader sees
// virtual paths only.
type outBuf struct {
	mu      sync.Mutex
	head    []byte
	headCap int
	ring    []byte // allocated once the head is full
	ringPos int    // next write position in ring
	ringLen int
	tailCap int
	total   int64 // bytes stored (after reverse mapping), including omitted ones
	un      unmapper
	changed *signal
}

func newOutBuf(budget int64, pm *PathMap, changed *signal) *outBuf {
	budget = max(budget, 2)
	h := int(budget / 2)
	return &outBuf{headCap: h, tailCap: int(budget) - h, un: unmapper{pm: pm}, changed: changed}
}

// Write stores p (never fails: the budget drops bytes, not writes).
func (b *outBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.store(b.un.feed(p))
	b.mu.Unlock()
	b.changed.fire()
	return len(p), nil
}

// flush emits bytes held back by the reverse mapper (end of input).
func (b *outBuf) flush() {
	b.mu.Lock()
	out := b.un.flush()
	b.store(out)
	b.mu.Unlock()
	if len(out) > 0 {
		b.changed.fire()
	}
}

func (b *outBuf) store(p []byte) {
	b.total += int64(len(p))
	if n := min(len(p), b.headCap-len(b.head)); n > 0 {
		b.head = append(b.head, p[:n]...)
		p = p[n:]
	}
	if len(p) == 0 {
		return
	}
	if b.ring == nil {
		b.ring = make([]byte, b.tailCap)
	}
	if len(p) >= b.tailCap {
		copy(b.ring, p[len(p)-b.tailCap:])
		b.ringPos, b.ringLen = 0, b.tailCap
		return
	}
	n := copy(b.ring[b.ringPos:], p)
	copy(b.ring, p[n:])
	b.ringPos = (b.ringPos + len(p)) % b.tailCap
	b.ringLen = min(b.ringLen+len(p), b.tailCap)
}

// tail returns the ring content in order, starting skip bytes into it.
func (b *outBuf) tail(skip int) []byte {
	out := make([]byte, 0, b.ringLen)
	start := (b.ringPos - b.ringLen + b.tailCap) % b.tailCap
	if start+b.ringLen <= b.tailCap {
		out = append(out, b.ring[start:start+b.ringLen]...)
	} else {
		out = append(out, b.ring[start:]...)
		out = append(out, b.ring[:b.ringLen-(b.tailCap-start)]...)
	}
	return out[skip:]
}

// String is the whole retained output, with the truncation marker where
// bytes were omitted.
func (b *outBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := string(b.head)
	if omitted := b.total - int64(len(b.head)) - int64(b.ringLen); omitted > 0 {
		s += truncMarker(omitted, "bytes")
	}
	if b.ringLen > 0 {
		s += string(b.tail(0))
	}
	return s
}

// readFrom returns the output from stream offset off onwards and the offset
// to continue from. Bytes no longer retained are replaced by the marker.
func (b *outBuf) readFrom(off int64) ([]byte, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if off < int64(len(b.head)) {
		return append([]byte(nil), b.head[off:]...), int64(len(b.head))
	}
	tailStart := b.total - int64(b.ringLen)
	if off < tailStart {
		return append([]byte(truncMarker(tailStart-off, "bytes")), b.tail(0)...), b.total
	}
	if off >= b.total {
		return nil, off
	}
	return b.tail(int(off - tailStart)), b.total
}

// size is the stream offset reached so far (bytes stored, omitted included).
func (b *outBuf) size() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}
