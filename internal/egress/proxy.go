package egress

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// Proxy serves the egress proxy on one Unix socket per sandbox (Open) and on
// authenticated listeners (ServeAuth).
type Proxy struct {
	cfg     Config
	forward *httputil.ReverseProxy
	// transport pools upstream connections by checked address and port,
	// never by name.
	transport *http.Transport

	mu      sync.Mutex
	sockets map[string]*server // by sandbox id
	authed  map[*server]struct{}
	// traffic counts each served sandbox's bytes (Traffic), by sandbox id.
	traffic map[string]*traffic
	closed  bool
}

var _ backend.EgressGate = (*Proxy)(nil)

// ErrClosed is Open's and ServeAuth's answer after Shutdown.
var ErrClosed = errors.New("egress: proxy shut down")

// New makes a proxy that serves nothing until Open or ServeAuth.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg.withDefaults(), sockets: map[string]*server{}, authed: map[*server]struct{}{},
		traffic: map[string]*traffic{}}
	p.transport = &http.Transport{
		DialContext: p.dialForward,
		// The client's Accept-Encoding goes through as sent and the body
		// comes back as the server sent it.
		DisableCompression:    true,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	p.forward = &httputil.ReverseProxy{
		Rewrite:        rewrite,
		Transport:      p.transport,
		FlushInterval:  -1, // stream: server-sent events and progress output arrive as sent
		BufferPool:     bufferPool{},
		ModifyResponse: recordStatus,
		ErrorHandler:   p.upstreamError,
		ErrorLog:       slog.NewLogLogger(p.cfg.Log.Handler(), slog.LevelDebug),
	}
	return p, nil
}

// Open serves id's egress proxy on a Unix socket at socket, replacing a
// listener id already has and a socket file left by an earlier process.
func (p *Proxy) Open(id backend.EgressIdentity, socket string) error {
	if err := id.Egress.Validate(); err != nil {
		return fmt.Errorf("egress: sandbox %s: %w", id.SandboxID, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	// The old listener goes first: closing it unlinks its path, which may
	// be the new one's.
	if old := p.sockets[id.SandboxID]; old != nil {
		delete(p.sockets, id.SandboxID)
		old.close()
	}
	dir, err := backend.OwnDir(filepath.Dir(socket))
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	// 0666: the sandbox runs as another uid; the directory's permissions
	// keep everyone else out.
	ln, err := backend.ListenSocket(dir, filepath.Base(socket), 0o666)
	// The directory is not held while it serves: a descriptor per sandbox
	// would be one more than the listener in the gateway's file limit
	// (bench -suite density); Close opens it again, with the same checks.
	dir.Close()
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	// A socket opened again (the keeper's repair) keeps counting on.
	counted := countingListener{Listener: ln, fixed: p.trafficOf(id.SandboxID)}
	s := p.newServer(counted, nil)
	s.socket = socket
	s.file, _ = os.Lstat(socket) // nil: Serves says no, and the keeper dials
	s.id.Store(&id)
	p.sockets[id.SandboxID] = s
	go s.http.Serve(s.ln) //nolint:errcheck // ends when Close closes ln
	return nil
}

// Reassign serves from's socket as id's from now on, its open connections
// included: a claimed pre-started sandbox keeps its listener, and the claim
// creates no socket file (a new inode costs a new thread's first request
// hundreds of microseconds on a journaling file system). Without a listener
// of from's at socket it closes from's and opens one, as Close and Open.
func (p *Proxy) Reassign(from string, id backend.EgressIdentity, socket string) error {
	if err := id.Egress.Validate(); err != nil {
		return fmt.Errorf("egress: sandbox %s: %w", id.SandboxID, err)
	}
	p.mu.Lock()
	s := p.sockets[from]
	if p.closed || s == nil || s.socket != socket {
		p.mu.Unlock()
		if s != nil { // from's listener elsewhere: closed, as a claim did before
			p.Close(from)
		}
		return p.Open(id, socket)
	}
	if old := p.sockets[id.SandboxID]; old != nil && old != s {
		old.close()
	}
	delete(p.sockets, from)
	p.sockets[id.SandboxID] = s
	if t := p.traffic[from]; t != nil {
		delete(p.traffic, from)
		p.traffic[id.SandboxID] = t
	}
	s.id.Store(&id)
	p.mu.Unlock()
	return nil
}

// Serves reports whether this proxy listens for sandboxID on socket, on the
// very file there now: the keeper's check without a connection (at 5,000
// sandboxes a pass dialled and accepted 5,000 of them every 10 s).
func (p *Proxy) Serves(sandboxID, socket string) bool {
	p.mu.Lock()
	s := p.sockets[sandboxID]
	p.mu.Unlock()
	if s == nil || s.socket != socket || s.file == nil || s.stopped() {
		return false
	}
	now, err := os.Lstat(socket)
	return err == nil && os.SameFile(s.file, now)
}

// Close stops serving sandboxID, ends its open tunnels and removes its socket.
func (p *Proxy) Close(sandboxID string) {
	p.mu.Lock()
	s := p.sockets[sandboxID]
	delete(p.sockets, sandboxID)
	delete(p.traffic, sandboxID)
	p.mu.Unlock()
	if s != nil {
		if dir, err := backend.OwnDir(filepath.Dir(s.socket)); err == nil {
			backend.RemoveSocket(dir, filepath.Base(s.socket))
			dir.Close()
		}
		s.close()
	}
}

// ServeAuth serves networked sandboxes on ln until Shutdown (then it returns
// nil): a request names its sandbox with Proxy-Authorization: Basic
// base64(sandboxID:password), and lookup says whether the password is that
// sandbox's, sent from source (the connection's address), and who the
// sandbox is. Anything else is answered 407.
func (p *Proxy) ServeAuth(ln net.Listener, lookup func(sandboxID, password string, source netip.Addr) (backend.EgressIdentity, bool)) error {
	s := p.newServer(countingListener{Listener: ln}, func(r *http.Request) (backend.EgressIdentity, bool) {
		id, password, ok := proxyBasicAuth(r.Header.Get("Proxy-Authorization"))
		if !ok {
			return backend.EgressIdentity{}, false
		}
		source, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil {
			return backend.EgressIdentity{}, false
		}
		who, ok := lookup(id, password, source.Addr().Unmap())
		if ok {
			p.countAuthed(r.Context(), who.SandboxID)
		}
		return who, ok
	})
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.authed[s] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.authed, s)
		p.mu.Unlock()
	}()
	if err := s.http.Serve(s.ln); !s.stopped() {
		return fmt.Errorf("egress: serve: %w", err)
	}
	return nil
}

// proxyBasicAuth parses "Basic base64(user:password)".
func proxyBasicAuth(header string) (user, password string, ok bool) {
	scheme, encoded, _ := strings.Cut(header, " ")
	if !strings.EqualFold(scheme, "basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return "", "", false
	}
	user, password, ok = strings.Cut(string(raw), ":")
	return user, password, ok && user != ""
}

// Shutdown stops every listener, lets requests and tunnels in flight finish
// until ctx is done, then ends the rest.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	var all []*server
	for _, s := range p.sockets {
		all = append(all, s)
	}
	for s := range p.authed {
		all = append(all, s)
	}
	clear(p.sockets)
	p.mu.Unlock()
	var errs []error
	for _, s := range all {
		errs = append(errs, s.shutdown(ctx))
	}
	p.transport.CloseIdleConnections()
	return errors.Join(errs...)
}

// server is one listener's HTTP server and the tunnels it hijacked, which
// http.Server no longer tracks.
type server struct {
	http *http.Server
	// ln is closed here, not left to http.Server: a Serve that has not
	// started yet would close it later, unlinking a path that by then may
	// be a new listener's.
	ln net.Listener
	// socket is where Open listens ("" for ServeAuth); file is the socket
	// file it made there.
	socket string
	file   os.FileInfo

	// id is who a connection to socket is (Open, Reassign).
	id atomic.Pointer[backend.EgressIdentity]

	mu      sync.Mutex
	tunnels map[net.Conn]struct{}
	done    bool
	wg      sync.WaitGroup
}

// newServer serves ln; identify says who a request comes from (nil: the
// server's id, one listener per sandbox).
func (p *Proxy) newServer(ln net.Listener, identify func(*http.Request) (backend.EgressIdentity, bool)) *server {
	s := &server{ln: ln, tunnels: map[net.Conn]struct{}{}}
	if identify == nil {
		identify = func(*http.Request) (backend.EgressIdentity, bool) { return *s.id.Load(), true }
	}
	s.http = &http.Server{
		Handler:           p.handler(s, identify),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       p.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ConnContext:       withConn, // ServeAuth's requests count to the sandbox they name
		// Malformed requests are answered 400 and logged at debug: a
		// sandbox may send them at will.
		ErrorLog: slog.NewLogLogger(p.cfg.Log.Handler(), slog.LevelDebug),
	}
	return s
}

// track registers a tunnel's connections; false once the server is closing.
func (s *server) track(conns ...net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return false
	}
	for _, c := range conns {
		s.tunnels[c] = struct{}{}
	}
	s.wg.Add(1)
	return true
}

func (s *server) untrack(conns ...net.Conn) {
	s.mu.Lock()
	for _, c := range conns {
		delete(s.tunnels, c)
	}
	s.mu.Unlock()
	s.wg.Done()
}

// stop refuses new tunnels and closes the listener.
func (s *server) stop() {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	s.ln.Close()
}

// stopped says whether stop ran (a Serve that ended was told to).
func (s *server) stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// close ends everything now.
func (s *server) close() {
	s.stop()
	s.http.Close()
	s.mu.Lock()
	for c := range s.tunnels {
		c.Close()
	}
	s.mu.Unlock()
}

// shutdown lets requests and tunnels finish until ctx is done.
func (s *server) shutdown(ctx context.Context) error {
	s.stop()
	err := s.http.Shutdown(ctx)
	if errors.Is(err, net.ErrClosed) {
		err = nil // stop closed the listener; a Serve still in Accept had it tracked
	}
	idle := make(chan struct{})
	go func() { s.wg.Wait(); close(idle) }()
	select {
	case <-idle:
	case <-ctx.Done():
		s.close()
	}
	return err
}
