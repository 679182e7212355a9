// Package webhook delivers the fleet's lifecycle events (package events'
// Redis Stream) to operators' HTTP endpoints, signed in the Standard
// Webhooks style and retried with backoff for a bounded time, then kept as
// dead letters.
//
// Each endpoint is a consumer group of the events stream ("webhook:{id}"),
// created at the stream's end when the endpoint is. Every replica reads
// the group (XREADGROUP), so each event goes to one replica, which
// delivers it and acknowledges it (XACK) once the endpoint answered 2xx or
// the event was dead-lettered. An event a replica took and did not finish
// stays in the group's pending list; once it has gone untouched for
// ClaimIdle (its replica died), another replica takes it (XAUTOCLAIM) and
// delivers it. A replica retrying an event touches it before each attempt
// so nobody takes it from a live replica. So nothing is lost when a
// replica dies, and an event is delivered twice only when a replica died
// after the endpoint got the event and before its XACK: the receiver
// drops the copy by its webhook-id, the event's stream id.
//
// Keys share the fleet's hash tag with the stream, so the Lua scripts
// (scripts.go) run on one Redis Cluster slot. The package knows Redis, the
// events and the egress address policy; not the pool or the backends.
package webhook
