package config

// docs/CONFIG.md is rendered from this registry; TestConfigDocIsCurrent
// fails while it is stale.
//go:generate go test -run TestConfigDocIsCurrent -update .

import (
	"flag"
	"strings"

	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// setting is one scalar setting: flag --idle-timeout, env
// SANDGATE_IDLE_TIMEOUT, YAML idle_timeout or, nested under its section,
// pool: {idle_timeout: ...}.
type setting struct {
	name  string // flag name; the other names derive from it
	usage string
	// zero is what 0 (numbers, durations, sizes) or empty (strings, lists)
	// means for this field, written once; "" for booleans.
	zero  string
	value flag.Value
}

// section groups settings for the nested YAML form, `gateway -h` and
// docs/CONFIG.md, in this order.
type section struct {
	name  string // the YAML block and the header
	title string
	// trim is the flag-name prefix a setting drops inside the block
	// (redis-url is redis: {url}); "" = name + "-". A setting without the
	// prefix keeps its whole name (storage: {data_dir}).
	trim     string
	settings []setting
}

// nestedKeyOf names a setting inside its section's block.
func (s section) nestedKeyOf(st setting) string {
	if k, ok := nestedNames[st.name]; ok {
		return s.name + "." + k
	}
	trim := s.trim
	if trim == "" {
		trim = s.name + "-"
	}
	return s.name + "." + yamlName(strings.TrimPrefix(st.name, trim))
}

// nestedNames are the settings whose name inside their block is not their
// flag name minus the block's prefix: egress is the egress block's mode.
var nestedNames = map[string]string{"egress": "mode"}

// computedDefaults describe the defaults worked out at start-up, where the
// stored zero is "not set" rather than the 0 a user may give.
var computedDefaults = map[string]string{
	"max-sandboxes-per-user": "8 with authentication, none without",
	"max-creates-per-user":   "4 with authentication, none without",
	"checkpoint-user-bytes":  "a quarter of data-dir's filesystem",
	"checkpoint-user-inodes": "a quarter of data-dir's inodes",
	"checkpoint-free-floor":  "1g, or a tenth of a smaller filesystem",
	"drain-delay":            "5s on a non-loopback listen address, none on loopback",
}

func (s setting) envName() string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(s.name, "-", "_"))
}
func (s setting) yamlName() string { return yamlName(s.name) }

func yamlName(flagName string) string { return strings.ReplaceAll(flagName, "-", "_") }

// settings binds every scalar setting of c to its names, in section order.
func (c *Config) settings() []setting {
	var all []setting
	for _, sec := range c.sections() {
		all = append(all, sec.settings...)
	}
	return all
}

// sections is the registry: every scalar setting of c, grouped. A new
// setting goes into the section whose block an operator would look in,
// with what its 0 or empty means (every setting but a boolean has one)
// and, for docs/CONFIG.md, a fuller explanation in settingDetails if its
// usage is not enough; then run go generate ./internal/config.
func (c *Config) sections() []section {
	p, d, k, r, ck := &c.Pool, &c.Docker, &c.Kubernetes, &c.Remote, &c.Checkpoints
	return []section{
		{name: "server", title: "listening, HTTP limits, shutdown", settings: []setting{
			{"listen", "address to listen on; a non-loopback one is refused without authentication unless insecure", "refused: host:port required", (*stringValue)(&c.Listen)},
			{"insecure", "allow a non-loopback listen address without authentication", "", (*boolValue)(&c.Insecure)},
			{"public-url", "URL clients use to reach this gateway (for the sandbox URLs it returns)", "taken from each request's Host", (*stringValue)(&c.PublicURL)},
			{"host-suffix", "host routing: {sandbox_id}.{suffix} reaches a sandbox on any path", "off", (*stringValue)(&c.HostSuffix)},
			{"preview-suffix", "preview links' host form: {link}.{suffix} (wildcard DNS to the gateway); each link is an origin of its own", "off: links use the path form", (*stringValue)(&c.PreviewSuffix)},
			{"sandbox-origin", "origin (scheme://host[:port]) that serves preview links' path form, /preview/{link}/, and nothing else; must reach this gateway", "the gateway's own origin, every preview response with Content-Security-Policy: sandbox", (*stringValue)(&c.SandboxOrigin)},
			{"allowed-hosts", "without auth, host names served besides localhost, 127.0.0.1, [::1], public-url's and host-suffix's, comma separated (* = any: no DNS-rebinding check)", "only those", (*listValue)(&c.AllowedHosts)},
			{"drain-delay", "how long a stopping gateway keeps serving with readiness failing before it stops accepting, so load balancers polling /readyz move traffic away first; a second SIGTERM cuts it short", "none: stop accepting at once", (*offDuration)(&c.DrainDelay)},
			{"shutdown-timeout", "how long a draining gateway waits for requests", "no wait for in-flight requests", (*durationValue)(&c.ShutdownTimeout)},
			{"read-header-timeout", "how long a client may take to send its request headers", "refused: must be positive", (*durationValue)(&c.ReadHeaderTimeout)},
			{"max-header-bytes", "largest request header block (431 past it), 4k to 16m", "refused: at least 4k", (*intValue)(&c.MaxHeaderBytes)},
			{"body-timeout", "a request body the gateway reads itself (status login, checkpoints, fork, MCP) must arrive within this long of its headers", "never", (*offDuration)(&c.BodyTimeout)},
			{"max-connections", "client connections open at once; past it new ones wait in the listen backlog", "half the descriptor limit", (*intValue)(&c.Conns.Max)},
			{"max-connections-per-source", "client connections one source address (an IPv6 /64) may hold open; past it they are closed", "a quarter of max-connections", (*intValue)(&c.Conns.PerSource)},
			{"server-impl", "HTTP server of the gateway: sandgate (its own) | net/http (the standard library's: a fallback should a bug be found in Sandgate's request parser)", "refused: sandgate or net/http", &oneOf{&c.ServerImpl, HTTPImpls}},
			{"transport-impl", "HTTP client the proxy reaches sandboxes with: sandgate (its own) | net/http (the standard library's http.Transport: a fallback should a bug be found in Sandgate's)", "refused: sandgate or net/http", &oneOf{&c.TransportImpl, HTTPImpls}},
		}},
		{name: "auth", title: "API keys, JWTs, the metrics token", settings: []setting{
			{"auth-api-keys", "static API keys: name=sha256hex[:threads+admin],... (sha256 of the key, never the key)", "none", (*apiKeysValue)(&c.Auth.APIKeys)},
			{"auth-jwt-hs256-secret", "HS256 secret of bearer JWTs (32 bytes or more)", "no HS256 JWTs", (*stringValue)(&c.Auth.JWT.HS256Secret)},
			{"auth-jwt-public-key-file", "PEM public key verifying RS256/ES256 bearer JWTs", "no RS256/ES256 key file", (*stringValue)(&c.Auth.JWT.PublicKeyFile)},
			{"auth-jwt-jwks-url", "JWKS URL of the token issuer (cached, refreshed hourly and on an unknown kid)", "no JWKS", (*stringValue)(&c.Auth.JWT.JWKSURL)},
			{"auth-jwt-issuer", "required iss of JWTs", "any issuer", (*stringValue)(&c.Auth.JWT.Issuer)},
			{"auth-jwt-audience", "required aud of JWTs (required with JWT auth unless auth-jwt-any-audience)", "refused with JWT auth, unless auth-jwt-any-audience", (*stringValue)(&c.Auth.JWT.Audience)},
			{"auth-jwt-any-audience", "accept JWTs minted for any audience (opt-out of auth-jwt-audience)", "", (*boolValue)(&c.Auth.JWT.AnyAudience)},
			{"auth-jwt-admin-claim", "JWT claim (name or dotted path) that makes a token an admin when it holds auth-jwt-admin-value", "no JWT is an admin", (*stringValue)(&c.Auth.JWT.AdminClaim)},
			{"auth-jwt-admin-value", "value of auth-jwt-admin-claim that makes a token an admin", "refused when auth-jwt-admin-claim is set", (*stringValue)(&c.Auth.JWT.AdminValue)},
			{"auth-jwt-leeway", "clock skew allowed on exp and nbf (at most 5m)", "no skew allowed", (*durationValue)(&c.Auth.JWT.Leeway)},
			{"metrics-token", "bearer token that opens /metrics and nothing else (Prometheus with auth on; 16+ characters)", "user credentials only", (*stringValue)(&c.MetricsToken)},
		}},
		{name: "storage", title: "thread data and host directories", settings: []setting{
			{"data-dir", "directory for thread data and backend state", "refused: must be set", (*stringValue)(&c.DataDir)},
			{"thread-data-quota", "soft limit on one thread's data under data-dir, e.g. 10g: measured, reported, file-API writes refused over it", "none", (*offBytes)(&c.ThreadDataQuota)},
			{"skills-dir", "host dir mounted read-only at /mnt/skills", "none mounted", (*stringValue)(&p.Mounts.SkillsDir)},
			{"acp-workspace", "host dir mounted read-only at /mnt/acp-workspace", "none mounted", (*stringValue)(&p.Mounts.ACPWorkspace)},
		}},
		{name: "redis", title: "the shared state", settings: []setting{
			{"redis-url", "Redis URL (redis://, rediss://, sentinel, cluster)", "an embedded server inside the gateway process: not durable, one replica only", (*stringValue)(&c.RedisURL)},
			{"redis-prefix", "key prefix (braces are dropped: Sandgate places its own hash tags)", "refused: must be set", (*stringValue)(&c.RedisPrefix)},
			{"redis-buckets", "how many buckets the indexes are split into; keep it for the life of the prefix's state", "64", (*intValue)(&c.RedisBuckets)},
			{"events-retention", "how long lifecycle events stay replayable (by id or time) in the fleet's stream, which also keeps at most 100000", "168h (7 days)", (*durationValue)(&c.EventsRetention)},
			{"egress-denied-every", "at most one egress_denied event per sandbox this often; the refusals between are counted in the next event", "10s", (*durationValue)(&c.EgressDeniedEvery)},
		}},
		{name: "pool", title: "the sandbox pool: backend, lifecycle, capacity", settings: []setting{
			{"backend", "sandbox backend: " + strings.Join(Backends, " | "), "refused: one of them", &oneOf{&c.Backend, Backends}},
			{"instance", "name of this replica in labels and logs", "hostname-pid", (*stringValue)(&p.Instance)},
			{"fleet", "this fleet's name, the sandgate.fleet label on every sandbox; reconciler and prune touch only its own", "the fleet named default", (*stringValue)(&p.Fleet)},
			{"idle-timeout", "destroy sandboxes idle this long", "never", (*offDuration)(&p.IdleTimeout)},
			{"max-sandboxes", "fleet-wide cap on sandboxes", "no cap", (*offInt)(&p.MaxSandboxes)},
			{"cap-mode", "soft (evict warm, else exceed with a warning) | hard (503)", "refused: soft or hard", (*capMode)(&p.HardCap)},
			{"acquire-timeout", "hard cap: how long a create waits for room before 503", "no wait: 503 at once", (*durationValue)(&p.AcquireTimeout)},
			{"provision-wait", "how long a request waits for its sandbox before 503 + Retry-After", "the default, 30s", (*durationValue)(&p.ProvisionWait)},
			{"create-timeout", "bound on one backend create incl. readiness", "the default, 2m", (*durationValue)(&p.CreateTimeout)},
			{"max-lifetime", "destroy a sandbox this long after it was created, busy or not", "never", (*offDuration)(&p.MaxLifetime)},
			{"health-interval", "how often each replica probes the sandboxes it serves; a sandbox whose server does not answer health-failures probes in a row is destroyed", "never", (*offDuration)(&p.HealthInterval)},
			{"health-timeout", "how long a health probe waits for the sandbox server's answer", "the default, 5s", (*durationValue)(&p.HealthTimeout)},
			{"health-failures", "health probes in a row without an answer that destroy a sandbox", "the default, 3", (*intValue)(&p.HealthFailures)},
			{"preview-max-ttl", "longest ttl a preview link may have; also how long a rotated-out signing key keeps verifying", "the default, 24h", (*durationValue)(&p.PreviewMaxTTL)},
			{"busy-idle-after", "a running command that used no CPU and wrote no output this long no longer keeps its sandbox from being frozen or reaped; a stopped one never does", "only a stop ends busy", (*offDuration)(&p.BusyIdleAfter)},
			{"freeze-after", "freeze a sandbox (process, docker) with no request and no running command for this long: processes stopped, memory kept, thawed by its next request on any replica", "never", (*durationValue)(&p.FreezeAfter)},
			{"prewarm", "pre-started sandboxes kept ready fleet-wide for new threads' first requests (process, docker, kubernetes); with templates, shared among them by recent demand", "none (with templates: the sum of their prewarm)", (*intValue)(&p.Prewarm)},
			{"default_template", "the template (YAML `templates:`) a thread gets when its create names none", "none: the backend's configuration", (*stringValue)(&p.DefaultTemplate)},
			{"metrics-interval", "how often each sandbox a replica serves is measured (CPU, memory, pids: GET /threads/{t}/sandbox/metrics, Prometheus); docker and kubernetes every 5 intervals", "the default, 1s", (*durationValue)(&p.MetricsInterval)},
			{"metrics-per-sandbox", "export one Prometheus series set per sampled sandbox (label sandbox_id); off: aggregates and the top metrics-top-n", "", (*boolValue)(&p.MetricsPerSandbox)},
			{"metrics-top-n", "without metrics-per-sandbox: how many sandboxes using the most CPU, and holding the most memory, get a Prometheus series each (labels rank, sandbox_id); at most 100", "none", (*intValue)(&p.MetricsTopN)},
			{"pause-warm", "pause warm sandboxes (process, docker) and unpause them on reclaim", "", (*boolValue)(&p.PauseWarm)},
			{"cache-ttl", "how long a replica trusts a cached route", "the default, 5s", (*durationValue)(&p.CacheTTL)},
			{"touch-interval", "how often activity is flushed to Redis", "the default, 1s", (*durationValue)(&p.TouchInterval)},
			{"reap-interval", "how often expired sandboxes are looked for", "the default, 10s", (*durationValue)(&p.ReapInterval)},
			{"lock-ttl", "provisioning lock TTL, refreshed while held", "the default, 15s", (*durationValue)(&p.LockTTL)},
			{"reconcile-interval", "how often backend sandboxes are compared with Redis", "never", (*offDuration)(&p.ReconcileInterval)},
			{"reconcile-grace", "age before an unrecorded sandbox is adopted", "the default, 1m", (*durationValue)(&p.ReconcileGrace)},
			{"reconcile-dry-run", "log what the reconciler would do, do nothing", "", (*boolValue)(&p.ReconcileDryRun)},
			{"bucket-lease-ttl", "how long a replica's lease on a bucket (its share of reaping and reconciling) outlives it", "the default, 15s", (*durationValue)(&p.BucketLeaseTTL)},
		}},
		{name: "limits", title: "per-user limits", settings: []setting{
			{"max-sandboxes-per-user", "fleet-wide cap on one user's sandboxes, 429 past it; admins exempt", "no cap", &setInt{&p.MaxSandboxesPerUser, &c.perUserSet.sandboxes}},
			{"max-creates-per-user", "fleet-wide cap on one user's creates in progress, 429 past it; admins exempt", "no cap", &setInt{&p.MaxCreatesPerUser, &c.perUserSet.creates}},
			{"max-requests-per-user", "requests in flight per user and replica, WebSockets included", "no cap", (*offInt)(&c.Limits.MaxRequests)},
			{"create-rate", "sandboxes created per user, fleet-wide: N/duration, e.g. 60/1m", "no limit", (*rateValue)(&c.Limits.CreateRate)},
			{"max-streams-per-user", "event streams of each kind (status page, provisioning progress) one non-admin user may hold open per replica, 429 past it", "the default, 8", (*intValue)(&c.Limits.Streams.PerUser)},
			{"admin-streams", "of each replica's 256 event streams, how many only admins may take", "the default, 32", (*intValue)(&c.Limits.Streams.AdminReserve)},
		}},
		{name: "proxy", title: "proxied requests and WebSockets", settings: []setting{
			{"sandbox-api-key", "shared API key sent as " + sandboxspec.SecretHeader + " to sandboxes without a secret of their own (third-party images)", "none sent", (*stringValue)(&c.Proxy.SandboxAPIKey)},
			{"max-body-bytes", "largest request body, counted as it streams", "no limit", (*offBytes)(&c.Proxy.MaxBodyBytes)},
			{"body-idle-timeout", "cut a proxied request (408) whose body makes no progress this long", "never", (*offDuration)(&c.BodyIdleTimeout)},
			{"forward-cookies", "pass clients' Cookie headers to sandboxes and their Set-Cookie back (off: neither crosses; sandbox responses are on the gateway's origin)", "", (*boolValue)(&c.Proxy.ForwardCookies)},
			{"ws-idle-timeout", "close an upgraded connection silent this long", "never", (*offDuration)(&c.Proxy.WSIdleTimeout)},
			{"ws-max-lifetime", "close an upgraded connection this long after it opened", "never", (*offDuration)(&c.Proxy.WSMaxLifetime)},
			{"max-upgraded", "upgraded (WebSocket) connections open at once per replica", "no cap", (*offInt)(&c.Proxy.MaxUpgraded)},
		}},
		{name: "egress", title: "what sandboxes reach outside", settings: []setting{
			{"egress", "what sandboxes reach outside: proxy (only allow-listed domains, through the gateway's egress proxy) | none | open (anything but other sandboxes; trusted code only)", "proxy", (*egressModeValue)(&p.Egress.Mode)},
			{"egress-allow", "domains the egress proxy lets through, comma separated: example.com, *.example.com (names below it), optionally :port", "nothing", (*listValue)(&p.Egress.Allow)},
			{"egress-dns", "DNS server (ip:port) the egress proxy resolves with", "the host's resolver", (*stringValue)(&c.Egress.DNS)},
			{"egress-allow-addresses", "CIDRs the egress proxy may connect to although private, loopback or link-local (an internal mirror), comma separated", "public addresses only", (*listValue)(&c.Egress.AllowAddresses)},
			{"egress-listen", "TCP address where the egress proxy also serves networked sandboxes (kubernetes), authenticated per sandbox", "off", (*stringValue)(&c.Egress.Listen)},
		}},
		{name: "webhooks", title: "lifecycle events delivered to operators' endpoints (endpoints: YAML webhook_endpoints or /admin/v1/webhooks)", trim: "webhook-", settings: []setting{
			{"webhook-max-age", "how long after an event its delivery to an endpoint is retried before it is dead-lettered", "24h", (*durationValue)(&c.Webhooks.MaxAge)},
			{"webhook-timeout", "bound on one delivery attempt, from dial to the end of the answer", "10s", (*durationValue)(&c.Webhooks.Timeout)},
			{"webhook-backoff", "delay before the first retry, doubled (with jitter) per retry up to webhook-max-backoff", "1s", (*durationValue)(&c.Webhooks.Backoff)},
			{"webhook-max-backoff", "longest delay between retries", "30s", (*durationValue)(&c.Webhooks.MaxBackoff)},
			{"webhook-claim-idle", "how long an event a replica took may go untouched before another replica delivers it (the first died); must exceed webhook-max-backoff + webhook-timeout", "1m", (*durationValue)(&c.Webhooks.ClaimIdle)},
			{"webhook-dead-letters", "dead letters kept per endpoint, the oldest dropped", "1000", (*intValue)(&c.Webhooks.DeadLetters)},
			{"webhook-concurrency", "deliveries in flight per endpoint and replica", "16", (*intValue)(&c.Webhooks.Concurrency)},
			{"webhook-allow-addresses", "CIDRs webhook endpoints may be on although private, loopback or link-local (a receiver inside the network), comma separated", "public addresses only", (*listValue)(&c.WebhookAllowAddresses)},
		}},
		{name: "checkpoints", title: "workspace checkpoints and their disk budget", trim: "checkpoint-", settings: []setting{
			{"checkpoint-keep", "workspace checkpoints kept per thread, newest first", "no limit", (*offInt)(&ck.Keep)},
			{"checkpoint-max-age", "drop workspace checkpoints older than this", "never", (*offDuration)(&ck.MaxAge)},
			{"checkpoint-user-bytes", "disk one user's checkpoints and thread data may take before a checkpoint or fork is refused (507), e.g. 20g", "no limit", (*offBytes)(&ck.UserBytes)},
			{"checkpoint-user-inodes", "files one user's checkpoints and thread data may hold before a checkpoint or fork is refused", "no limit", (*offInt)(&ck.UserInodes)},
			{"checkpoint-user-threads", "threads with data one user may have before a new thread's sandbox or a fork onto one is refused", "no limit", (*offInt)(&ck.UserThreads)},
			{"checkpoint-free-floor", "free space a checkpoint or fork must leave on data-dir's filesystem", "none", (*offBytes)(&ck.FreeFloor)},
			{"checkpoint-method", "how checkpoints copy files: reflink | copy", "detect: reflink where data-dir's filesystem can, else copy", (*stringValue)(&ck.Method)},
		}},
		{name: "process", title: "the process backend", settings: []setting{
			{"process-binary", "sandbox server binary for the process backend", "this binary", (*stringValue)(&c.Process.Binary)},
			{"process-isolation", "namespaces: each process sandbox in its own user, mount, PID, network, IPC and UTS namespaces with Landlock, seccomp and limits; none: a plain child process of the gateway's user (one trusted user only; refused with auth)", "namespaces", &oneOf{&c.Process.Isolation, []string{"", process.IsolationNamespaces, process.IsolationNone}}},
			{"process-image", "image archive (docker save or OCI layout tarball) whose programs and libraries isolated process sandboxes run instead of the host's", "the host's", (*stringValue)(&c.Process.Image)},
			{"process-image-gc-grace", "an image store entry ({data_dir}/images) that no template, process_image or live sandbox uses is removed once unused this long (checked at start-up and every quarter of it); at least 10m, the bound of one import", "1h", (*offDuration)(&c.Process.ImageGCGrace)},
			{"process-read-only-image", "keep image roots (process-image, templates' rootfs) read-only in every sandbox: no writable layer of its own over the image, so nothing installs system-wide", "", (*boolValue)(&c.Process.ReadOnlyImage)},
			{"process-memory", "memory limit per isolated process sandbox (cgroup, else RLIMIT_AS), e.g. 512m, 2g", "none", (*offBytes)(&c.Process.Limits.Memory)},
			{"process-pids-limit", "processes and threads per isolated process sandbox", "none", (*offInt)(&c.Process.Limits.Processes)},
			{"process-open-files", "open files per process in an isolated process sandbox", "none", (*offInt)(&c.Process.Limits.OpenFiles)},
			{"process-file-size", "largest file a process in an isolated sandbox may write", "none", (*offBytes)(&c.Process.Limits.FileSize)},
			{"process-tmp-size", "size of an isolated process sandbox's private /tmp", "the kernel's tmpfs default (half the RAM)", (*offBytes)(&c.Process.Limits.TmpSize)},
		}},
		{name: "docker", title: "the docker backend; image, container-prefix and port serve every container backend", settings: []setting{
			{"image", "sandbox image of the container backends", "refused: must be set", &setString{&d.Image, &c.imageSet}},
			{"container-prefix", "container name prefix: {prefix}-{sandbox_id}", "refused: a container name prefix", (*stringValue)(&d.ContainerPrefix)},
			{"port", "port the sandbox server listens on inside a container", "the default, 8080", (*intValue)(&d.Port)},
			{"docker-host", "Docker engine address", "DOCKER_HOST, else the local socket", (*stringValue)(&d.Host)},
			{"docker-network", "attach sandboxes to this Docker network and reach them by name (gateway in a container); nothing is published", "published on the host's loopback", (*stringValue)(&d.Network)},
			{"docker-open-network", "Docker network of sandboxes whose egress is open (a bridge with inter-container traffic off, created when first needed)", "the default, sandgate-open", (*stringValue)(&d.OpenNetwork)},
			{"docker-memory", "memory limit per sandbox, e.g. 512m, 2g", "none", (*offBytes)(&d.Memory)},
			{"docker-cpus", "CPU limit per sandbox, e.g. 0.5, 2", "none", (*offCPUs)(&d.NanoCPUs)},
			{"docker-pids-limit", "process and thread limit per sandbox", "none", (*offInt)(&d.PidsLimit)},
			{"docker-seccomp-unconfined", "run sandboxes without seccomp (the all-in-one image's browser needs it); logged as a warning", "", (*boolValue)(&d.SeccompUnconfined)},
			{"docker-cap-add", "capabilities given back after all are dropped, comma separated (e.g. CHOWN,SETUID,SETGID)", "none", (*listValue)(&d.CapAdd)},
			{"docker-user", "user sandboxes run as: uid:gid or name; image = the image's USER", "a host uid of each sandbox's own, never the gateway's", (*stringValue)(&d.User)},
			{"docker-disk-limit", "writable-layer size limit per sandbox, e.g. 10g (needs a storage driver that supports it)", "none", (*offBytes)(&d.DiskLimit)},
			{"docker-pull-policy", "always | if-not-present | never", "if-not-present", (*stringValue)(&d.PullPolicy)},
		}},
		{name: "kubernetes", title: "the kubernetes backend", settings: []setting{
			{"kubernetes-kubeconfig", "kubeconfig file of the kubernetes backend", "in-cluster service account", (*stringValue)(&k.Kubeconfig)},
			{"kubernetes-namespace", "namespace of sandbox Pods", "the kubeconfig context's, else the gateway Pod's", (*stringValue)(&k.Namespace)},
			{"kubernetes-url-mode", "how the gateway reaches sandbox Pods: service | nodeport | pod-ip", "service", (*stringValue)(&k.URLMode)},
			{"kubernetes-node-host", "node address for url mode nodeport (gateway outside the cluster)", "refused with nodeport", (*stringValue)(&k.NodeHost)},
			{"kubernetes-cluster-domain", "cluster DNS domain of Service URLs", "the default, cluster.local", (*stringValue)(&k.ClusterDomain)},
			{"kubernetes-cpu-request", "CPU request per sandbox Pod", "the default, 100m", (*stringValue)(&k.CPURequest)},
			{"kubernetes-cpu-limit", "CPU limit per sandbox Pod", "the default, 1", (*stringValue)(&k.CPULimit)},
			{"kubernetes-memory-request", "memory request per sandbox Pod", "the default, 256Mi", (*stringValue)(&k.MemoryRequest)},
			{"kubernetes-memory-limit", "memory limit per sandbox Pod", "the default, 1Gi", (*stringValue)(&k.MemoryLimit)},
			{"kubernetes-runtime-class", "RuntimeClass of sandbox Pods, e.g. gvisor or kata", "the cluster's default", (*stringValue)(&k.RuntimeClass)},
			{"kubernetes-egress-proxy-url", "egress proxy URL sandbox Pods use, http://host:port", "the sandgate-egress Service of the namespace", (*stringValue)(&k.EgressProxyURL)},
			{"kubernetes-egress-proxy-port", "gateway Pods' egress proxy port the per-sandbox NetworkPolicy opens", "the default, 3128", (*intValue)(&k.EgressProxyPort)},
			{"kubernetes-gateway-pod-labels", "labels of the gateway Pods, key=value,...", "refused with the kubernetes backend (nothing to select)", (*mapValue)(&k.GatewayPodLabels)},
			{"kubernetes-node-selector", "node labels sandbox Pods must match: key=value,...", "any node", (*mapValue)(&k.NodeSelector)},
			{"kubernetes-tolerations", "taints sandbox Pods tolerate: key[=value][:Effect],... (* = every taint)", "none", (*tolerationsValue)(&k.Tolerations)},
			{"kubernetes-image-pull-policy", "Always | IfNotPresent | Never", "Kubernetes' default", (*stringValue)(&k.ImagePullPolicy)},
			{"kubernetes-image-pull-secrets", "image pull secrets of sandbox Pods, comma separated", "none", (*listValue)(&k.ImagePullSecrets)},
			{"kubernetes-active-deadline", "sandbox Pods end after this long whatever happens, a backstop", "never", (*durationValue)(&k.ActiveDeadline)},
			{"kubernetes-run-as-non-root", "refuse sandbox images that run as root", "", (*boolValue)(&k.RunAsNonRoot)},
			{"kubernetes-run-as-user", "uid of sandbox Pods' processes", "the image's user", (*intValue)(&k.RunAsUser)},
			{"kubernetes-run-as-group", "gid of sandbox Pods' processes", "the image's group", (*intValue)(&k.RunAsGroup)},
			{"kubernetes-fs-group", "group owning sandbox Pods' volumes (and a supplementary group of their processes)", "none", (*intValue)(&k.FSGroup)},
			{"kubernetes-read-only-root", "mount the sandbox image read-only (/tmp becomes an emptyDir)", "", (*boolValue)(&k.ReadOnlyRootFS)},
			{"kubernetes-server", "path of Sandgate's sandbox server in the image: each Pod runs it with a secret of its own, and freeze and stats work", "the image's entrypoint, the shared sandbox_api_key", (*stringValue)(&k.Server)},
			{"kubernetes-user-data-pvc", "PVC holding thread data at users/{user}/threads/{thread}/user-data", "no PVC (see the host path)", (*stringValue)(&k.UserDataPVC)},
			{"kubernetes-shared-data-dir", "data_dir is the root of the user-data volume (mounted in the gateway too): checkpoints, restore and fork work; off, they answer 501", "", (*boolValue)(&k.SharedDataDir)},
			{"kubernetes-user-data-host-path", "node directory holding thread data, instead of a PVC", "no host path; with no PVC either, an emptyDir lost with each Pod", (*stringValue)(&k.UserDataHostPath)},
			{"kubernetes-skills-pvc", "PVC mounted read-only at /mnt/skills", "none mounted", (*stringValue)(&k.SkillsPVC)},
			{"kubernetes-skills-host-path", "node directory mounted read-only at /mnt/skills", "none mounted", (*stringValue)(&k.SkillsHostPath)},
		}},
		{name: "remote", title: "the remote backend's provisioner", trim: "provisioner-", settings: []setting{
			{"provisioner-url", "DeerFlow-compatible provisioner of the remote backend", "refused with the remote backend", (*stringValue)(&r.URL)},
			{"provisioner-api-key", "X-API-Key sent to the provisioner", "none sent", (*stringValue)(&r.APIKey)},
			{"provisioner-sandbox-hosts", "hosts besides the provisioner's own that its sandbox_urls may name (any port; * = any), comma separated", "the provisioner's own only", (*listValue)(&r.SandboxHosts)},
		}},
		{name: "log", title: "logging", settings: []setting{
			{"log-format", "json | text | auto (text on a terminal)", "refused: one of them", &oneOf{&c.LogFormat, []string{"json", "text", "auto"}}},
			{"log-level", "debug | info | warn | error", "refused: one of them", &oneOf{&c.LogLevel, []string{"debug", "info", "warn", "error"}}},
		}},
	}
}
