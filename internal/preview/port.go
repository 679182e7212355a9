package preview

import (
	"strconv"
	"sync"
)

// portTableMax bounds the ports whose decimal form is precomputed: below
// it are the dev servers' usual ports (3000, 5173, 8000, 8080, 8888...).
// A higher port costs one 5-byte allocation per request.
const portTableMax = 10000

// portWidth is the widest decimal below portTableMax.
const portWidth = 4

// portTable holds every port below portTableMax left-aligned in a slot of
// portWidth bytes: one 40 KB string, built on first use, so a port's
// decimal form is a substring of it.
var portTable = sync.OnceValue(func() string {
	b := make([]byte, portTableMax*portWidth)
	for p := range portTableMax {
		strconv.AppendInt(b[p*portWidth:p*portWidth], int64(p), 10)
	}
	return string(b)
})

// PortString is the decimal form of the link's port, which the proxy puts
// in the upstream path; without allocating for a port below 10000 (the
// request path must not pay strconv.Itoa's allocation per request).
func (l *Link) PortString() string {
	p := int(l.Port)
	if p >= portTableMax {
		return strconv.Itoa(p)
	}
	n := 1
	for v := p; v >= 10; v /= 10 {
		n++
	}
	return portTable()[p*portWidth : p*portWidth+n]
}
