// Package telemetry sets up logs, traces and metrics.
package telemetry

import (
	"io"
	"log/slog"
	"os"

	"golang.org/x/term"
)

// NewLogger returns the gateway's slog logger: JSON, or text when format is
// "text" or "auto" on a terminal.
func NewLogger(format, level string, w io.Writer) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lv}
	if format == "text" || (format == "auto" && isTerminal(w)) {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
