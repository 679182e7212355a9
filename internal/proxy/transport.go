package proxy

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"
)

// TransportConfig tunes the connection pool of one sandbox incarnation.
// The zero value is the documented default.
type TransportConfig struct {
	DialTimeout     time.Duration // 0 = 2s: a sandbox is local or in-cluster
	MaxIdlePerHost  int           // 0 = 256 (Go's default of 2 reconnects under load)
	IdleConnTimeout time.Duration // 0 = 90s
}

// NewTransport returns the pool for one sandbox incarnation: HTTP/1.1 only,
// no proxy from the environment, no compression (bodies pass through as the
// sandbox wrote them), and no response-header timeout, because an exec may
// legitimately answer after many minutes.
func NewTransport(cfg TransportConfig) *http.Transport {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.MaxIdlePerHost == 0 {
		cfg.MaxIdlePerHost = 256
	}
	if cfg.IdleConnTimeout == 0 {
		cfg.IdleConnTimeout = 90 * time.Second
	}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{},
		MaxIdleConnsPerHost:   cfg.MaxIdlePerHost,
		IdleConnTimeout:       cfg.IdleConnTimeout,
		ExpectContinueTimeout: time.Second,
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
	}
}
