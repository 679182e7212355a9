package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// client calls one gateway's /admin/v1 API.
type client struct {
	base    *url.URL
	token   string
	timeout time.Duration
	http    *http.Client
}

func newClient(c common) (*client, error) {
	u, err := url.Parse(strings.TrimRight(c.url, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("--url %q: want http(s)://host[:port]", c.url)
	}
	return &client{base: u, token: c.token, timeout: c.timeout, http: &http.Client{}}, nil
}

// apiError is a gateway's JSON error answer.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Status == http.StatusUnauthorized {
		msg += " (set SANDGATE_TOKEN or --token to an admin credential)"
	}
	return fmt.Sprintf("%s (HTTP %d %s)", msg, e.Status, e.Code)
}

// do sends one request; stream leaves the body open for the caller (and
// the timeout then bounds only the wait for the response head).
func (c *client) do(ctx context.Context, method, path string, q url.Values, stream bool) (*http.Response, context.CancelFunc, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	var cancel context.CancelFunc
	if stream {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		cancel()
		return nil, nil, err
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
		return nil, nil, decodeError(resp)
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

func decodeError(resp *http.Response) error {
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
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

// getJSON decodes a JSON answer into out.
func (c *client) call(ctx context.Context, method, path string, q url.Values, out any) error {
	resp, cancel, err := c.do(ctx, method, path, q, false)
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}
