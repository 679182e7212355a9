package router

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/testutil"
)

// A handler panic is a JSON 500 to the client and one log line with its
// stack, while http.ErrAbortHandler (a stream aborted on purpose) passes.
func TestPanicIsLoggedOnceWithItsStack(t *testing.T) {
	t.Parallel()
	var logs testutil.LogBuffer
	rt := New(Deps{Pool: stubPool{}, Aliases: stubPool{}, Log: slog.New(slog.NewJSONHandler(&logs, nil))})
	rt.echo.GET("/boom", func(echo.Context) error { panic("deliberate test panic /secret/path") })
	rt.echo.GET("/abort", func(echo.Context) error { panic(http.ErrAbortHandler) })

	rec := httptest.NewRecorder()
	rt.ServeHTTP(rec, httptest.NewRequest("GET", "http://localhost/boom", nil))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"internal"`) ||
		strings.Contains(rec.Body.String(), "secret") || strings.Contains(rec.Body.String(), "goroutine") {
		t.Fatalf("panic answer: %d %s", rec.Code, rec.Body.String())
	}
	out := logs.String()
	if n := strings.Count(out, "deliberate test panic"); n != 1 {
		t.Fatalf("panic logged %d times, want once:\n%s", n, out)
	}
	if strings.Count(out, "[running]:") != 1 || !strings.Contains(out, "recover_test.go") || !strings.Contains(out, `"path":"/boom"`) {
		t.Fatalf("panic logged without its stack or path:\n%s", out)
	}

	defer func() {
		if v := recover(); v != http.ErrAbortHandler {
			t.Fatalf("ErrAbortHandler was not re-raised: %v", v)
		}
	}()
	rt.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "http://localhost/abort", nil))
}
