package router

import (
	"context"
	"encoding/json"
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

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/checkpoint"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/proxy"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/usage"
	"github.com/sandgate/sandgate/internal/webhook"
)

// The router's own refusals, by the file that returns them; statusOf
// gives each its status and code.
var (
	// admin.go
	errBadFilter = errors.New("state must be active, frozen or warm")
	errBadTail   = errors.New("tail must be a non-negative integer")

	// bodyidle.go
	// errBodyIdle is a request body that stalled for the body idle timeout.
	errBodyIdle = errors.New("the request body made no progress in time")

	// checkpoints.go
	errBadCheckpointBody = errors.New("request body must be a JSON object")
	errForkSelf          = errors.New("a thread cannot be forked onto itself")

	// dataplane.go
	errBadSandboxID = errors.New("sandbox id must be 16 lowercase hex characters")
	errBadPort      = errors.New("port must be 1-65535, written plainly (no sign, no leading zero)")

	// dotsegment.go
	// errDotSegment refuses a data-plane path with dot segments (why:
	// dotsegment.go).
	errDotSegment = errors.New("path must not contain . or .. segments (plain, percent-encoded or with backslashes)")

	// events.go
	errBadUntil        = errors.New(`until must be "ready" or absent`)
	errBadSince        = errors.New("since and Last-Event-ID must be an event id (ms-seq) or, for since, an RFC 3339 time")
	errProgressStreams = errors.New("too many open provisioning-progress streams; retry later")

	// metrics.go
	errBadStream = errors.New(`stream must be 1, true, 0, false or absent`)

	// guard.go
	errOtherUser    = errors.New("only an admin credential may act for another user")
	errScope        = errors.New("this credential lacks the scope this route needs")
	errThreadDenied = errors.New("this credential may not open this thread")

	// host.go
	errBadHost = errors.New("host must be {sandbox_id}.{suffix} or {port}-{sandbox_id}.{suffix}")

	// hostcheck.go
	// errMisdirectedHost refuses a request for a host name the gateway does not
	// serve (421): without authentication that is the DNS-rebinding defence.
	errMisdirectedHost = errors.New("this gateway serves no such host name without authentication " +
		"(DNS rebinding protection): use localhost, its public_url or a name listed in allowed_hosts")

	// limits.go
	// errTooManyRequests: the user's requests in flight are at the cap.
	errTooManyRequests = errors.New("too many requests in flight for this user")

	// origin.go
	// errCrossSite refuses a browser request made by another site's page.
	errCrossSite = errors.New("cross-site request refused")

	// provisioner.go
	errBadEgress        = errors.New("egress")
	errBadProvisionerID = errors.New("sandbox_id must be 1-128 characters of [A-Za-z0-9._:-]")
	errEgressAdmin      = errors.New("egress: only an admin credential may set a sandbox's egress policy")
	// errReservedID: ids of the derived form (16 lowercase hex) belong to the
	// (user, thread) they derive from. Refusing every other use, whether or not
	// such a sandbox exists, leaves nobody able to squat another user's
	// predictable id, and the answer says nothing about what exists.
	errReservedID = errors.New("sandbox_id has the form of a derived sandbox id (16 lowercase hex) but is not the id of this user_id and thread_id; send that id, or an id of another form")

	// status.go
	errStatusStreams = errors.New("too many open status event streams; retry later")

	// statusaction.go
	// errStatusForm refuses a status-page action without its session's
	// form token or without a same-origin Origin header (CSRF).
	errStatusForm   = errors.New("status page action refused: reload the page (missing or wrong form token, or no same-origin Origin header)")
	errStatusAction = errors.New("no such status page action: destroy, freeze, thaw or checkpoint")

	// webhooks.go
	errBadWebhookBody = errors.New(`request body must be {"url": "https://...", "events": ["ready", ...], "secret": "whsec_..."} (events and secret optional)`)
	errBadLimit       = errors.New("limit must be an integer from 1 to 1000")
	errNoWebhooks     = errors.New("this gateway delivers no webhooks")

	// streamcap.go
	// errUserStreams: the user holds its share of a kind's streams.
	errUserStreams = errors.New("too many open event streams for this user; close one (another tab?) and retry")
)

// quotaError refuses a file write to a thread measured over its quota (507).
type quotaError struct {
	usage usage.Usage
	quota int64
}

func (e *quotaError) Error() string {
	return fmt.Sprintf("the thread's data (%d bytes, measured at %s) is over its quota of %d bytes (thread_data_quota): "+
		"file writes through the API are refused until files are deleted", e.usage.Bytes,
		e.usage.MeasuredAt.UTC().Format(time.RFC3339), e.quota)
}

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
	if e, _, ok := optionError(err); ok {
		return e
	}
	var he *echo.HTTPError
	var tooLarge *http.MaxBytesError
	var unreachable *proxy.UnreachableError
	var port *proxy.PortError
	var badBody *proxy.BodyReadError
	var exchange *proxy.ExchangeError
	var badResponse *proxy.BadResponseError
	var netErr net.Error
	var rateLimited *pool.RateLimitError
	var image *backend.ImageError
	var quota *quotaError
	var unsupported *backend.NotSupportedError
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
		errors.Is(err, errBadPort), errors.Is(err, errBadProvisionerID), errors.Is(err, errBadHost), errors.Is(err, errDotSegment), errors.Is(err, errBadEgress),
		errors.Is(err, errBadFilter), errors.Is(err, errBadTail), errors.Is(err, errBadUntil), errors.Is(err, errBadSince),
		errors.Is(err, errBadStream),
		errors.Is(err, errBadCheckpointBody), errors.Is(err, errForkSelf), errors.Is(err, checkpoint.ErrBadID),
		errors.Is(err, checkpoint.ErrBadLabel), errors.Is(err, errBadPreviewBody), errors.Is(err, pool.ErrBadPreview),
		errors.Is(err, errBadWebhookBody), errors.Is(err, errBadLimit), errors.Is(err, webhook.ErrBadEndpoint):
		return apiError{http.StatusBadRequest, "bad_request", err.Error(), 0}
	case errors.Is(err, webhook.ErrNotFound):
		return apiError{http.StatusNotFound, "webhook_not_found", err.Error(), 0}
	case errors.Is(err, webhook.ErrConfigured):
		return apiError{http.StatusConflict, "conflict", err.Error(), 0}
	case errors.Is(err, errNoWebhooks):
		return apiError{http.StatusNotImplemented, "not_supported", err.Error(), 0}
	case errors.Is(err, errCrossSite), errors.Is(err, errStatusForm), errors.Is(err, errScope), errors.Is(err, errThreadDenied), errors.Is(err, errOtherUser),
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
	case errors.Is(err, checkpoint.ErrNoThread):
		return apiError{http.StatusNotFound, "not_found", "no such thread: it has no workspace yet (its first request, or PUT /threads/{thread}/sandbox, makes one)", 0}
	case errors.Is(err, checkpoint.ErrNotFound):
		return apiError{http.StatusNotFound, "checkpoint_not_found", "no such checkpoint", 0}
	case errors.Is(err, checkpoint.ErrNotEmpty):
		return apiError{http.StatusConflict, "thread_exists", "the fork's thread already has a sandbox or files; fork onto a new thread", 0}
	case errors.Is(err, pool.ErrBusy):
		return apiError{http.StatusConflict, "sandbox_busy", "the sandbox is running a command or serving a request; retry when it is idle (restore: or force)", 0}
	case errors.Is(err, checkpoint.ErrTooDeep):
		return apiError{http.StatusUnprocessableEntity, "workspace_too_deep", "the workspace's directory tree is too deep to checkpoint", 0}
	case errors.Is(err, errNoPreview):
		return apiError{http.StatusNotFound, "preview_not_found", err.Error(), 0}
	case errors.Is(err, pool.ErrPreviewKeys):
		return apiError{http.StatusServiceUnavailable, "preview_keys_unavailable", err.Error(), 2}
	case errors.Is(err, pool.ErrNotFound):
		return apiError{http.StatusNotFound, "not_found", "no such sandbox", 0}
	case errors.Is(err, errStatusAction):
		return apiError{http.StatusNotFound, "not_found", err.Error(), 0}
	case errors.Is(err, pool.ErrProvisioning):
		return apiError{http.StatusServiceUnavailable, "provisioning", "the sandbox is being provisioned; retry shortly", 2}
	case errors.Is(err, pool.ErrCapacity):
		return apiError{http.StatusServiceUnavailable, "capacity", "the sandbox pool is full; retry later", 5}
	case errors.Is(err, pool.ErrState):
		return apiError{http.StatusServiceUnavailable, "state_unavailable", "the gateway cannot reach its state store (Redis); retry shortly", 2}
	case errors.As(err, &unsupported):
		return apiError{http.StatusNotImplemented, "not_supported", unsupported.Error(), 0}
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
	case errors.As(err, &port) && errors.Is(err, syscall.ECONNREFUSED):
		return apiError{http.StatusBadGateway, "port_closed", sandboxspec.PortClosed(port.Port), 0}
	case errors.As(err, &port):
		return apiError{http.StatusBadGateway, "port_unreachable", "port " + port.Port + " in the sandbox could not be reached", 0}
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
	body := api.ErrorBody{Error: api.ErrorDetail{Code: e.code, Message: e.message}}
	if _, field, ok := optionError(err); ok {
		body.Error.Field = field
	}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		body.Detail = e.message
	}
	_ = jsonEncode(w, body)
}

func jsonEncode(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }
