// Package status holds the status page's templates and static files,
// embedded: the page is server-rendered and needs no build step.
package status

import (
	"embed"
	"html/template"
	"io/fs"
	"strconv"
	"time"
)

//go:embed templates/*.html
var templates embed.FS

//go:embed static
var static embed.FS

// Templates are "page" (the whole status page), "live" (the part the
// script re-fetches: sandboxes, counts, replicas, errors), "detail" (one
// sandbox's page) with its re-fetched part "sandbox", "confirm" (an
// action's form) and "login".
var Templates = template.Must(template.New("").Funcs(template.FuncMap{
	"ago":   Ago,
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05") },
	"iso":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
}).ParseFS(templates, "templates/*.html"))

// Static is the page's CSS and script, served under /status/static/.
var Static, _ = fs.Sub(static, "static")

// Ago renders a duration the way the tables show ages: "42s", "7m", "3h", "2d".
func Ago(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return d.Truncate(time.Second).String()
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d"
}
