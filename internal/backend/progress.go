package backend

import "context"

// StepPulling is the Progress step of an image pull.
const StepPulling = "pulling"

// Progress is one report of a slow step inside Create (an image pull), so
// a client watching the thread sees more than a long silence.
type Progress struct {
	// Step names the step (StepPulling).
	Step string
	// Bytes of Total done so far (Total 0: not known yet).
	Bytes, Total int64
	// Done marks the step's last report.
	Done bool
}

type progressKey struct{}

// WithProgress returns a context whose creates report their slow steps to
// report. report is called from the backend's goroutines, possibly often:
// it must be quick and safe for concurrent use.
func WithProgress(ctx context.Context, report func(Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, report)
}

// ProgressOf is the report function WithProgress put in ctx, or nil.
func ProgressOf(ctx context.Context) func(Progress) {
	report, _ := ctx.Value(progressKey{}).(func(Progress))
	return report
}
