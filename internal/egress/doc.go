// Package egress is the gateway's egress proxy: a sandbox in egress mode
// "proxy" has no route out except an HTTP forward proxy (absolute-URI
// http:// requests and CONNECT tunnels) served here.
//
// Trust model. Everything a sandbox sends is hostile: request lines, Host
// headers, CONNECT targets, names, bodies. Who sends it is not taken from
// the request: a sandbox reaches its own Unix socket (Open), so the socket
// is the identity; networked sandboxes (kubernetes) present a per-sandbox
// password (ServeAuth). A request gets through only if its host is a name
// on the sandbox's allow-list (never an IP literal), the name resolves, and
// every address it resolves to is public (not loopback, private, link-local
// such as cloud metadata, CGNAT, multicast or reserved, in any IPv6 form)
// unless the operator allowed that address. The proxy then dials the
// address it checked, never the name again, so a DNS answer that changes
// between check and dial (rebinding) gains nothing. HTTPS goes through
// CONNECT: the tunnel is answered, then its TLS ClientHello is read and
// its server name must be the name the CONNECT was allowed for (no name,
// or no TLS, is refused) before anything is dialled, so an allowed name
// on a shared host cannot front for another. Past the ClientHello the
// tunnel is not inspected.
package egress
