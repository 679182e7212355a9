// Package api holds the JSON bodies of the gateway's own HTTP endpoints:
// what the router encodes and decodes, and what the CLI and the MCP server
// send and read back. It imports only the standard library; the router
// converts its internal types (pool records, checkpoints, backend figures)
// to these at the edge. internal/router/openapi.yaml describes the same
// bodies, and api_openapi_test.go in the router holds the two together.
//
// Field order is the encoding's order. Bodies the router once built from
// maps (encoded with sorted keys) keep their fields in key order, so the
// bytes on the wire did not change.
package api

// ErrorBody is every error answer of the gateway.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
	// Detail repeats the message on the provisioner API, in the shape
	// FastAPI (DeerFlow's provisioner) gives every error.
	Detail string `json:"detail,omitempty"`
}

// ErrorDetail is the machine-readable code and the message of an error.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the request field refused, when one was.
	Field string `json:"field,omitempty"`
}

// Health answers /healthz, /readyz and the provisioner's /health.
type Health struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// Version and Revision are the gateway's build (/healthz only; empty
	// when unknown).
	Version  string `json:"version,omitempty"`
	Revision string `json:"revision,omitempty"`
}

// SessionsRevoked answers DELETE /status/sessions.
type SessionsRevoked struct {
	Revoked int    `json:"revoked"`
	User    string `json:"user"`
}
