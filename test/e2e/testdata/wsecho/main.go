// Command wsecho is a WebSocket echo server for tests of the port bridge:
// started inside a sandbox as `wsecho PORT`, it listens on 127.0.0.1:PORT
// and answers every message on any path with "echo: " and the message,
// as a dev server's hot-reload socket would talk back. A plain GET gets a
// page whose script opens such a socket and shows the echo (a browser
// test's). Every request's method, path and headers are written to stdout
// as one JSON line, so a test can see what reached the sandbox. Static
// (CGO off), so it runs in the busybox image and the process jail alike.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"

	"github.com/coder/websocket"
)

// page opens a socket next to itself, sends one message and shows the
// answer in #got.
const page = `<!doctype html><title>wsecho</title><p id="got">waiting</p>
<script>
const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host +
  location.pathname.replace(/[^/]*$/, "") + "hmr");
ws.onopen = () => ws.send("from the page");
ws.onmessage = (e) => { document.getElementById("got").textContent = e.data; };
ws.onerror = () => { document.getElementById("got").textContent = "error"; };
</script>
`

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: wsecho PORT")
		os.Exit(2)
	}
	var mu sync.Mutex
	logs := json.NewEncoder(os.Stdout)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		_ = logs.Encode(map[string]any{"method": r.Method, "path": r.URL.Path, "headers": r.Header})
		mu.Unlock()
		if r.Header.Get("Upgrade") == "" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = io.WriteString(w, page)
			return
		}
		// The page's Origin is its preview origin, and the Host the one the
		// gateway's bridge sends: an origin check would refuse every page.
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo: "), msg...)); err != nil {
				return
			}
		}
	})
	if err := http.ListenAndServe("127.0.0.1:"+os.Args[1], h); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
