package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/checkpoint"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/proxy"
)

// apiError is one row of the error table: what the client is told. Internal
// error text never reaches the client; it is logged.
type apiError struct {
	status     int
	code       string
	message    string
	retryAfter int // seconds; 0 = no header
}

// retryAfterOf rounds a wait up to whole seconds, at least one.
func retryAfterOf(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// statusOf is the one place errors become statuses.
func statusOf(err error) apiError {
	var he *echo.HTTPError
	var tooLarge *http.MaxBytesError
	var unreachable *proxy.UnreachableError
	var badBody *proxy.BodyReadError
	var exchange *proxy.ExchangeError
	var badResponse *proxy.BadResponseError
	var netErr net.Error
	var rateLimited *pool.RateLimitError
	var image *backend.ImageError
	var quota *quotaError
	var userQuota *pool.QuotaError
	var budget *checkpoint.BudgetError
	switch {
	case errors.Is(err, auth.ErrUnauthenticated):
		// Before bad input: a token whose sub is no valid user name is a bad credential.
		msg := auth.ErrUnauthenticated.Error()
		if errors.Is(err, identity.ErrBadUser) {
			msg += ": the credential's user (JWT sub) is not a valid user name: " + identity.ErrBadUser.Error()
		}
		return apiError{http.StatusUnauthorized, "unauthorized", msg, 0}
	case errors.Is(err, identity.ErrBadThread), errors.Is(err, identity.ErrBadUser), errors.Is(err, errBadSandboxID),
		errors.Is(err, errBadProvisionerID), errors.Is(err, errBadHost), errors.Is(err, errDotSegment), errors.Is(err, errBadEgress),
		errors.Is(err, errBadFilter), errors.Is(err, errBadTail), errors.Is(err, errBadUntil),
		errors.Is(err, errBadCheckpointBody), errors.Is(err, errForkSelf), errors.Is(err, checkpoint.ErrBadID),
		errors.Is(err, checkpoint.ErrBadLabel):
		return apiError{http.StatusBadRequest, "bad_request", err.Error(), 0}
	case errors.Is(err, errCrossSite), errors.Is(err, errScope), errors.Is(err, errThreadDenied), errors.Is(err, errOtherUser),
		errors.Is(err, errEgressAdmin):
		return apiError{http.StatusForbidden, "forbidden", err.Error(), 0}
	case errors.Is(err, errMisdirectedHost):
		return apiError{http.StatusMisdirectedRequest, "misdirected_host", err.Error(), 0}
	case errors.Is(err, errReservedID):
		return apiError{http.StatusConflict, "conflict", errReservedID.Error(), 0}
	case errors.Is(err, pool.ErrIdentityConflict):
		return apiError{http.StatusConflict, "identity_conflict", "the sandbox id of this user and thread is held by a record of another user or thread; it is not served (an operator must remove the record)", 0}
	case errors.Is(err, errTooManyRequests):
		return apiError{http.StatusTooManyRequests, "rate_limited", err.Error(), 1}
	case errors.As(err, &rateLimited):
		return apiError{http.StatusTooManyRequests, "rate_limited", "too many new sandboxes for this user; retry later", retryAfterOf(rateLimited.RetryAfter)}
	case errors.As(err, &userQuota):
		return apiError{http.StatusTooManyRequests, "user_quota", userQuotaMessage(userQuota), retryAfterOf(userQuota.RetryAfter)}
	case errors.Is(err, errUserStreams):
		return apiError{http.StatusTooManyRequests, "stream_limit", err.Error(), 5}
	case errors.Is(err, errStatusStreams):
		return apiError{http.StatusServiceUnavailable, "status_streams", err.Error(), 5}
	case errors.Is(err, errProgressStreams):
		return apiError{http.StatusServiceUnavailable, "progress_streams", err.Error(), 5}
	case errors.Is(err, proxy.ErrUpgradeCapacity):
		return apiError{http.StatusServiceUnavailable, "upgrade_capacity", "too many open WebSocket connections; retry later", 5}
	case errors.Is(err, checkpoint.ErrNotFound):
		return apiError{http.StatusNotFound, "checkpoint_not_found", "no such checkpoint, or the thread has no workspace yet", 0}
	case errors.Is(err, checkpoint.ErrNotEmpty):
		return apiError{http.StatusConflict, "thread_exists", "the fork's thread already has a sandbox or files; fork onto a new thread", 0}
	case errors.Is(err, pool.ErrBusy):
		return apiError{http.StatusConflict, "sandbox_busy", "the sandbox is running a command or serving a request; retry when it is idle (restore: or force)", 0}
	case errors.Is(err, checkpoint.ErrTooDeep):
		return apiError{http.StatusUnprocessableEntity, "workspace_too_deep", "the workspace's directory tree is too deep to checkpoint", 0}
	case errors.Is(err, pool.ErrNotFound):
		return apiError{http.StatusNotFound, "not_found", "no such sandbox", 0}
	case errors.Is(err, pool.ErrProvisioning):
		return apiError{http.StatusServiceUnavailable, "provisioning", "the sandbox is being provisioned; retry shortly", 2}
	case errors.Is(err, pool.ErrCapacity):
		return apiError{http.StatusServiceUnavailable, "capacity", "the sandbox pool is full; retry later", 5}
	case errors.Is(err, pool.ErrState):
		return apiError{http.StatusServiceUnavailable, "state_unavailable", "the gateway cannot reach its state store (Redis); retry shortly", 2}
	case errors.Is(err, backend.ErrNotSupported):
		return apiError{http.StatusNotImplemented, "not_supported", "the sandbox backend cannot tell or do this", 0}
	case errors.Is(err, backend.ErrUnavailable):
		return apiError{http.StatusServiceUnavailable, "backend_unavailable", "the sandbox backend is unavailable; retry later", 5}
	case errors.As(err, &quota):
		return apiError{http.StatusInsufficientStorage, "quota_exceeded", quota.Error(), 0}
	case errors.As(err, &budget):
		return apiError{http.StatusInsufficientStorage, "insufficient_storage", budget.Error(), 0}
	case errors.Is(err, syscall.ENOSPC):
		// Before the broken-connection row: a syscall.Errno is a net.Error.
		return apiError{http.StatusInsufficientStorage, "insufficient_storage", "the gateway's data filesystem ran out of space or inodes (ENOSPC); an operator must free some", 0}
	case errors.Is(err, syscall.EDQUOT):
		return apiError{http.StatusInsufficientStorage, "insufficient_storage", "the gateway's disk quota on its data filesystem ran out (EDQUOT); an operator must free some", 0}
	case errors.Is(err, pool.ErrStorage):
		return apiError{http.StatusInsufficientStorage, "storage_unavailable", "the gateway cannot write the thread's data directory (disk full or permissions); an operator must fix it", 0}
	case errors.As(err, &image):
		return apiError{http.StatusBadGateway, "sandbox_image_missing", "the sandbox failed to start: its image " + image.Image +
			" is not available to the sandbox backend; an operator must build, load or pull it", 0}
	case errors.Is(err, pool.ErrCreate):
		return apiError{http.StatusBadGateway, "sandbox_start_failed", "the sandbox failed to start", 0}
	case errors.Is(err, errBodyIdle):
		return apiError{http.StatusRequestTimeout, "body_timeout", "the request body made no progress in time", 0}
	case errors.As(err, &tooLarge):
		return apiError{http.StatusRequestEntityTooLarge, "too_large", "request body too large", 0}
	case errors.As(err, &badBody):
		// Before the broken-connection row: the client's body broke, not the sandbox.
		return apiError{http.StatusBadRequest, "bad_request", "the request body is malformed or truncated", 0}
	case errors.As(err, &badResponse):
		return apiError{http.StatusBadGateway, "sandbox_bad_response", "the sandbox sent an invalid response", 0}
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return apiError{http.StatusGatewayTimeout, "timeout", "the sandbox did not answer in time", 0}
	case errors.Is(err, proxy.ErrResponseHeadersTooLarge):
		return apiError{http.StatusBadGateway, "sandbox_headers_too_large", "the sandbox answered with headers over the gateway's limit", 0}
	case errors.Is(err, backend.ErrUnsafeSocket):
		// The sandbox put something else in its socket's place (a symlink
		// to another daemon's socket): never dialled.
		return apiError{http.StatusBadGateway, "sandbox_socket_refused", "the sandbox's socket is not one its server made; the gateway does not connect to it", 0}
	case errors.As(err, &unreachable):
		return apiError{http.StatusBadGateway, "sandbox_unreachable", "the sandbox did not answer", 0}
	case errors.As(err, &netErr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &exchange):
		// The connection broke mid-request (sandbox killed or crashed): not
		// retried, since the sandbox may have acted on the request.
		return apiError{http.StatusBadGateway, "sandbox_connection_lost", "the sandbox closed the connection before answering", 0}
	case errors.As(err, &he):
		return apiError{he.Code, codeOf(he.Code), http.StatusText(he.Code), 0}
	default:
		return apiError{http.StatusInternalServerError, "internal", "internal error", 0}
	}
}

// ClientReason is what a client is told of err, "code: message" from the
// table above: a failed create's lifecycle event says it.
func ClientReason(err error) string {
	e := statusOf(err)
	return e.code + ": " + e.message
}

// userQuotaMessage names the limit a create hit.
func userQuotaMessage(e *pool.QuotaError) string {
	switch e.Limit {
	case pool.LimitCreatesPerUser:
		return fmt.Sprintf("this user has %d sandbox creates in progress, the limit (%s); retry shortly", e.Max, e.Limit)
	case pool.LimitFairShare:
		return fmt.Sprintf("the sandbox pool is full and this user holds its fair share of %d sandboxes (%s); release one or retry later", e.Max, e.Limit)
	}
	return fmt.Sprintf("this user holds %d sandboxes, the limit (%s); release one or retry later", e.Max, e.Limit)
}

func codeOf(status int) string {
	switch status {
	case http.StatusNotFound:
		return "not_found"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusTooManyRequests:
		return "rate_limited"
	}
	if status < 500 {
		return "bad_request"
	}
	return "internal"
}

type errorBody struct {
	Error errorDetail `json:"error"`
	// Detail repeats the message on the provisioner API, in the shape
	// FastAPI (DeerFlow's provisioner) gives every error.
	Detail string `json:"detail,omitempty"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeError answers err as JSON, logging what the client is not told.
func writeError(log *slog.Logger, w http.ResponseWriter, r *http.Request, err error) {
	e := statusOf(err)
	level := slog.LevelDebug
	if e.status >= 500 {
		level = slog.LevelWarn
	}
	log.Log(r.Context(), level, "request failed", "status", e.status, "code", e.code,
		"method", r.Method, "path", r.URL.Path, "err", err)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if e.status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="sandgate"`)
	}
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	w.WriteHeader(e.status)
	body := errorBody{Error: errorDetail{e.code, e.message}}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		body.Detail = e.message
	}
	_ = jsonEncode(w, body)
}
