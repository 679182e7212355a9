// Command wsecho is a WebSocket echo server for tests of the port bridge:
// started inside a sandbox as `wsecho PORT`, it listens on 127.0.0.1:PORT
// and answers every message on any path with "echo: " and the message,
// as a dev server's hot-reload socket would talk back. Static (CGO off), so
// it runs in the busybox image and the process jail alike.
package main

import (
	"fmt"
	"net/http"
	"os"

	"github.com/coder/websocket"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: wsecho PORT")
		os.Exit(2)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
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
