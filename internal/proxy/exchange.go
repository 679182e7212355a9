package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// BodyReadError is a client's request body that could not be read (bad
// chunked framing, a truncated body): the client's fault, a 400.
type BodyReadError struct{ Err error }

func (e *BodyReadError) Error() string { return fmt.Sprintf("read request body: %v", e.Err) }
func (e *BodyReadError) Unwrap() error { return e.Err }

// ExchangeError is the sandbox's side of an exchange failing after the
// request began (the connection broke while the body was sent, a malformed
// answer). The transport reports a broken body write in a type errors.As
// cannot see through; this one can, and always means the sandbox.
type ExchangeError struct{ Err error }

func (e *ExchangeError) Error() string { return fmt.Sprintf("sandbox exchange failed: %v", e.Err) }
func (e *ExchangeError) Unwrap() error { return e.Err }

// BadResponseError is an answer no client may be given, such as a
// 101 Switching Protocols to a request that asked for no such upgrade.
type BadResponseError struct{ Reason string }

func (e *BadResponseError) Error() string { return "bad sandbox response: " + e.Reason }

// failure classifies an error of a round trip that was not retried: whose
// side broke. A context error stays as it is (client gone, or timeout).
func failure(err error, body *guardedBody) error {
	if rerr := body.readErr(); rerr != nil {
		return &BodyReadError{Err: rerr}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &ExchangeError{Err: err}
}

// checkResponse refuses a 101 the request did not ask for: ReverseProxy
// would report it as an unclassified error (a 500).
func checkResponse(resp *http.Response) error {
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nil
	}
	asked, got := upgradeType(resp.Request.Header), upgradeType(resp.Header)
	if asked == "" || !strings.EqualFold(asked, got) {
		return &BadResponseError{Reason: fmt.Sprintf("101 switching to %q when %q was requested", got, asked)}
	}
	return nil
}

func upgradeType(h http.Header) string {
	if !httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}
