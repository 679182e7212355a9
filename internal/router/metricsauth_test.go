package router

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
)

func TestMetricsToken(t *testing.T) {
	t.Parallel()
	const token = "0123456789abcdef-metrics"
	served := func(c echo.Context) error { return c.String(http.StatusOK, "metrics") }
	refused := func(echo.Context) error { return echo.ErrUnauthorized }
	h := metricsToken(token, served, refused)
	e := echo.New()
	for authz, want := range map[string]int{
		"Bearer " + token:       200,
		"":                      401,
		token:                   401,
		"Bearer " + token + "x": 401,
		"Bearer " + token[:8]:   401,
		"bearer " + token + " ": 401,
		"Basic " + token:        401,
		"Bearer alice-user-key": 401, // user credentials go to the normal check
	} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		if authz != "" {
			r.Header.Set("Authorization", authz)
		}
		rec := httptest.NewRecorder()
		err := h(e.NewContext(r, rec))
		got := rec.Code
		if err != nil {
			got = err.(*echo.HTTPError).Code
		}
		if got != want {
			t.Errorf("Authorization %q: %d, want %d", authz, got, want)
		}
	}
	// No token configured: only the user credentials' check.
	r := httptest.NewRequest("GET", "/metrics", nil)
	r.Header.Set("Authorization", "Bearer ")
	if err := metricsToken("", served, refused)(e.NewContext(r, httptest.NewRecorder())); err == nil {
		t.Error("an empty metrics token opened /metrics")
	}
}
