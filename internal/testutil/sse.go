package testutil

import (
	"bufio"
	"io"
	"strings"
)

// SSEEvent is one server-sent event as a client sees it.
type SSEEvent struct {
	Name, ID, Data string
}

// SSEReader reads the events of an SSE body one at a time, so a test can
// stop (or break the connection) in the middle of a stream.
type SSEReader struct {
	sc *bufio.Scanner
}

// NewSSEReader reads events from body.
func NewSSEReader(body io.Reader) *SSEReader {
	sc := bufio.NewScanner(body)
	sc.Buffer(nil, 4<<20)
	return &SSEReader{sc: sc}
}

// Next returns the next event; comments (pings) are skipped. At the end of
// the body it returns io.EOF, or the read error.
func (r *SSEReader) Next() (SSEEvent, error) {
	var ev SSEEvent
	seen := false
	for r.sc.Scan() {
		line := r.sc.Text()
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			if seen {
				return ev, nil
			}
		case field == "event":
			ev.Name, seen = value, true
		case field == "id":
			ev.ID, seen = value, true
		case field == "data":
			if seen && ev.Data != "" {
				ev.Data += "\n"
			}
			ev.Data, seen = ev.Data+value, true
		}
	}
	if err := r.sc.Err(); err != nil {
		return ev, err
	}
	return ev, io.EOF
}
