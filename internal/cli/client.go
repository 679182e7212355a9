package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/api"
)

// client calls one gateway's API: /admin/v1, or a user's /threads routes.
type client struct {
	base    *url.URL
	token   string
	timeout time.Duration
	http    *http.Client
	// credential names, in the 401 hint, the credential the calls need.
	credential string
}

func newClient(c common) (*client, error) {
	u, err := url.Parse(strings.TrimRight(c.url, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("--url %q: want http(s)://host[:port]", c.url)
	}
	return &client{base: u, token: c.token, timeout: c.timeout, http: &http.Client{}, credential: "an admin credential"}, nil
}

// apiError is a gateway's JSON error answer.
type apiError struct {
	Status     int
	Code       string
	Message    string
	credential string // for the 401 hint
}

func (e *apiError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Status == http.StatusUnauthorized {
		msg += " (set SANDGATE_TOKEN or --token to " + e.credential + ")"
	}
	return fmt.Sprintf("%s (HTTP %d %s)", msg, e.Status, e.Code)
}

// do sends one request with body (nil: none; else JSON); stream leaves the
// answer's body open for the caller (and the timeout then bounds only the
// wait for the response head).
func (c *client) do(ctx context.Context, method, path string, q url.Values, body []byte, stream bool) (*http.Response, context.CancelFunc, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	var cancel context.CancelFunc
	if stream {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Accept", "application/json")
	var timer *time.Timer
	if stream {
		timer = time.AfterFunc(c.timeout, cancel)
	}
	resp, err := c.http.Do(req)
	if timer != nil {
		timer.Stop()
	}
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("%s %s: %w", method, u.Redacted(), unwrapURL(err))
	}
	if resp.StatusCode >= 300 {
		defer cancel()
		defer resp.Body.Close()
		e := decodeError(resp)
		e.credential = c.credential
		return nil, nil, e
	}
	return resp, cancel, nil
}

// unwrapURL drops url.Error's repetition of method and URL.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func decodeError(resp *http.Response) *apiError {
	var body api.ErrorBody
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &apiError{Status: resp.StatusCode}
	if json.Unmarshal(data, &body) == nil {
		e.Code, e.Message = body.Error.Code, body.Error.Message
	}
	if e.Code == "" {
		e.Code = "error"
	}
	return e
}

// call decodes a JSON answer into out.
func (c *client) call(ctx context.Context, method, path string, q url.Values, out any) error {
	return c.send(ctx, method, path, q, nil, out)
}

// send sends in as JSON (nil: no body) and decodes the answer into out
// (nil, or a 204: nothing to decode).
func (c *client) send(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("%s %s: encode request: %w", method, path, err)
		}
	}
	resp, cancel, err := c.do(ctx, method, path, q, body, false)
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}
