package sandbox

// What the server shares with the gateway's side (package backend, which
// this package does not import: it links OpenTelemetry, see Tracing).
// wire_test.go pins each to backend's.
const (
	// secretHeader carries the server's secret on every request.
	secretHeader = "X-Aio-Api-Key"
	// virtualWorkspace is the default home when it is mapped.
	virtualWorkspace = "/mnt/user-data/workspace"
	// egressPort is the loopback port of the egress bridge.
	egressPort = 3128
)
