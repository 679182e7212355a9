package sandbox

import (
	"bytes"
	"testing"
)

func TestOutBufKeepsHeadAndTail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		budget int64
		writes []string
		want   string
	}{
		{"under budget", 10, []string{"abc", "def"}, "abcdef"},
		{"exactly budget", 6, []string{"abc", "def"}, "abcdef"},
		{"one big write", 6, []string{"0123456789"}, "012" + truncMarker(4, "bytes") + "789"},
		{"ring wraps", 6, []string{"01", "23", "45", "67", "89"}, "012" + truncMarker(4, "bytes") + "789"},
		{"tail only slightly over", 6, []string{"0123456"}, "012" + truncMarker(1, "bytes") + "456"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newOutBuf(tc.budget, nil, newSignal())
			for _, w := range tc.writes {
				_, _ = b.Write([]byte(w))
			}
			if got := b.String(); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestOutBufReadFrom: a reader that keeps up sees every byte exactly once;
// one that falls behind gets the marker instead of the lost bytes.
func TestOutBufReadFrom(t *testing.T) {
	t.Parallel()
	b := newOutBuf(8, nil, newSignal())
	var got []byte
	var off int64
	var all bytes.Buffer
	for i := range 20 {
		chunk := []byte{byte('a' + i), byte('A' + i)}
		all.Write(chunk)
		_, _ = b.Write(chunk)
		var part []byte
		part, off = b.readFrom(off)
		got = append(got, part...)
	}
	if !bytes.Equal(got, all.Bytes()) {
		t.Fatalf("keeping up: %q, want %q", got, all.Bytes())
	}
	if head, next := b.readFrom(2); string(head) != "bB" || next != 4 {
		t.Fatalf("read inside head: %q next %d", head, next)
	}
	late, next := b.readFrom(10)
	if want := truncMarker(26, "bytes") + "sStT"; string(late) != want || next != 40 {
		t.Fatalf("falling behind: %q next %d, want %q", late, next, want)
	}
	if rest, n := b.readFrom(next); len(rest) != 0 || n != next {
		t.Fatalf("read at end: %q %d", rest, n)
	}
}

func TestTruncateChars(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		limit int
		want  string
	}{
		{"hello", 0, "hello"},
		{"hello", 5, "hello"},
		{"hello world", 4, "he" + truncMarker(7, "characters") + "ld"},
		{"ääääää", 2, "ä" + truncMarker(4, "characters") + "ä"},
	} {
		if got := truncateChars(tc.in, tc.limit); got != tc.want {
			t.Errorf("truncateChars(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
	}
}

func TestIncompleteSuffix(t *testing.T) {
	t.Parallel()
	euro := []byte("€") // 3 bytes
	for _, tc := range []struct {
		in   []byte
		want int
	}{
		{[]byte("abc"), 0},
		{euro, 0},
		{euro[:1], 1},
		{append([]byte("x"), euro[:2]...), 2},
		{nil, 0},
	} {
		if got := incompleteSuffix(tc.in); got != tc.want {
			t.Errorf("incompleteSuffix(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
