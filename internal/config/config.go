// Package config loads the gateway's configuration from flags, environment
// variables and an optional YAML file (SANDGATE_CONFIG), in that order of
// precedence over the defaults. Every scalar setting has all three names,
// derived from one registry entry (registry.go): flag --idle-timeout, env
// SANDGATE_IDLE_TIMEOUT, YAML idle_timeout, which the file may also nest
// in the setting's section (pool: {idle_timeout: 10m}). The YAML file also
// accepts DeerFlow's `sandbox:` keys where they mean the same thing. The
// registry renders `gateway -h` and docs/CONFIG.md.
package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/checkpoint"
	"github.com/sandgate/sandgate/internal/sandboxspec"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/docker"
	"github.com/sandgate/sandgate/internal/backend/kubernetes"
	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/backend/remote"
	"github.com/sandgate/sandgate/internal/imagestore"
	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/proxy"
	"github.com/sandgate/sandgate/internal/router"
	"github.com/sandgate/sandgate/internal/serve"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/webhook"
)

// Backends the gateway knows.
var Backends = []string{"process", "docker", "kubernetes", "remote", "applecontainer", "auto"}

// Config is the whole gateway configuration.
type Config struct {
	// Version and Revision are the binary's build (not settings: main
	// fills them in), answered on /healthz for `gateway version`.
	Version, Revision string

	Listen string
	// Insecure allows a non-loopback listen address without authentication.
	Insecure bool
	DataDir  string
	// ThreadDataQuota is the measured soft limit on a thread's data in
	// bytes (-1 = none), for the backends that keep it under DataDir.
	ThreadDataQuota int64
	// Checkpoints are the retention and copy method of threads'
	// workspace checkpoints (process and docker backends).
	Checkpoints checkpoint.Config
	// RedisURL is empty for the embedded, non-durable Redis-protocol server.
	RedisURL    string
	RedisPrefix string
	// RedisBuckets splits the indexes into this many buckets (0 =
	// statedb.DefaultBuckets); fixed for the life of a prefix's state.
	RedisBuckets int
	// EventsRetention is how long the fleet's lifecycle events stay
	// readable (0 = events.DefaultRetention, 7 days).
	EventsRetention time.Duration
	// EgressDeniedEvery is how often one sandbox's refused egress makes an
	// egress_denied event; the refusals between are counted in the next
	// (0 = events.DefaultThrottleEvery, 10 s).
	EgressDeniedEvery time.Duration
	Backend           string
	// PublicURL is how clients reach this gateway (for sandbox_url in the
	// provisioner API); empty = taken from each request's Host.
	PublicURL string
	// DrainDelay is how long a stopping gateway keeps serving with readiness
	// failing; 0 = unset (EffectiveDrainDelay), -1 = none.
	DrainDelay      time.Duration
	ShutdownTimeout time.Duration
	LogFormat       string // json | text | auto
	LogLevel        string
	// ReadHeaderTimeout bounds how long a client may take to send its
	// request headers (slowloris); MaxHeaderBytes bounds their size.
	ReadHeaderTimeout time.Duration
	MaxHeaderBytes    int
	// BodyIdleTimeout cuts a proxied request whose body makes no progress
	// this long (408), so a stalled upload does not hold its sandbox in
	// flight forever; negative = never.
	BodyIdleTimeout time.Duration
	// BodyTimeout bounds reading a request body the gateway reads itself
	// (status login, checkpoints, fork, MCP, provisioner API), from the end
	// of its head; proxied bodies have BodyIdleTimeout instead. Negative =
	// never.
	BodyTimeout time.Duration
	// Conns cap the client connections open at once, in all and per source
	// address.
	Conns serve.ConnLimits
	// ServerImpl and TransportImpl choose the HTTP/1.1 stacks: Sandgate's
	// own (internal/serve, proxy.Transport; the default) or the standard
	// library's, a fallback for a bug found in Sandgate's parsers.
	ServerImpl, TransportImpl string
	// HostSuffix turns on host routing: {sandbox_id}.{suffix}; "" = off.
	HostSuffix string
	// PreviewSuffix serves preview links as {link}.{suffix}; "" = off.
	PreviewSuffix string
	// SandboxOrigin is the origin (scheme://host[:port]) preview links'
	// path form is served on; "" = the gateway's own, confined by a
	// Content-Security-Policy sandbox.
	SandboxOrigin string
	// AllowedHosts are host names a gateway without authentication serves
	// besides localhost, 127.0.0.1, [::1], public_url's and host_suffix's
	// (the DNS-rebinding check); "*" turns the check off.
	AllowedHosts []string
	// MetricsToken is a bearer token that opens /metrics only (a
	// Prometheus scrape with auth on); "" = user credentials only.
	MetricsToken string

	// Auth: API keys and JWTs; none configured = no authentication, which
	// only a loopback listen address (or Insecure) allows.
	Auth auth.Config
	// Limits are the per-user limits of each replica.
	Limits router.LimitsConfig

	Pool    pool.Config
	Proxy   proxy.Config
	Process ProcessConfig
	// Docker configures the docker backend; its image, container_prefix
	// and port (and memory, cpus, user) serve applecontainer too.
	Docker docker.Config
	// Kubernetes configures the kubernetes backend; its Image, Port and
	// PodPrefix come from the container settings (KubernetesConfig).
	Kubernetes kubernetes.Config
	// Remote is the DeerFlow-compatible provisioner of the remote backend.
	Remote remote.Config
	// Egress is the egress proxy's configuration; the policy itself is
	// Pool.Egress (every sandbox's).
	Egress EgressConfig
	// Webhooks configures the delivery of lifecycle events to operators'
	// endpoints; Webhooks.Endpoints are the YAML `webhook_endpoints:`.
	Webhooks webhook.Config
	// WebhookAllowAddresses are CIDRs webhook endpoints may be on although
	// private, loopback or link-local (the egress proxy's address policy,
	// with these exceptions instead of egress_allow_addresses).
	WebhookAllowAddresses []string
	// Templates are the YAML `templates:` as written; Pool.Templates are
	// the same, parsed, that the gateway completes with imported images.
	Templates []TemplateConfig

	// imageSet records that image was given (a DeerFlow config.yaml with
	// image: asks for container sandboxes).
	imageSet bool
	// perUserSet records which per-user caps were given: unset ones get
	// the multi-user defaults when authentication is on.
	perUserSet struct{ sandboxes, creates bool }
}

// The values of server_impl and transport_impl.
const (
	ImplSandgate = "sandgate"
	ImplNetHTTP  = "net/http"
)

// HTTPImpls are the valid server_impl and transport_impl values.
var HTTPImpls = []string{ImplSandgate, ImplNetHTTP}

// The per-user caps of a gateway with authentication (several users, who
// must not starve each other) unless configured; 0 configured = no cap.
// Without authentication there is one user and no default cap.
const (
	MultiUserMaxSandboxesPerUser = 8
	MultiUserMaxCreatesPerUser   = 4
)

// multiUserDefaults gives the unset per-user caps their multi-user
// defaults when authentication is configured.
func (c *Config) multiUserDefaults() {
	if !c.Auth.Enabled() {
		return
	}
	if !c.perUserSet.sandboxes {
		c.Pool.MaxSandboxesPerUser = MultiUserMaxSandboxesPerUser
	}
	if !c.perUserSet.creates {
		c.Pool.MaxCreatesPerUser = MultiUserMaxCreatesPerUser
	}
}

// ImageRequested reports whether the configuration names a sandbox image:
// it asks for container sandboxes, which the process backend is not.
func (c Config) ImageRequested() bool { return c.imageSet }

// ProcessConfig configures the process backend.
type ProcessConfig struct {
	// Binary is the sandbox server executable; empty = this gateway binary.
	Binary string
	// Isolation is namespaces (the default) or none (see process.Config).
	Isolation string
	// Image is a container image archive (`docker save` or an OCI layout
	// tarball) whose userland isolated sandboxes run instead of the host's
	// programs and libraries; "" = the host's. Imported at start-up into
	// {DataDir}/images.
	Image string
	// ImageGCGrace: an entry of {DataDir}/images that no template,
	// process_image or live sandbox uses is removed once unused this long
	// (and an abandoned import's temporaries once this old); 0 = 1h,
	// negative = never. See imagestore.Store.Collect.
	ImageGCGrace time.Duration
	// ReadOnlyImage turns off the per-sandbox writable layer over image
	// roots (process.Config.ReadOnlyImage); false = a layer where the
	// gateway runs as root.
	ReadOnlyImage bool
	// Limits bound each isolated sandbox.
	Limits jail.Limits
}

// EgressConfig configures the gateway's egress proxy (internal/egress).
type EgressConfig struct {
	// DNS is the only DNS server the proxy asks ("host:port"); "" = the
	// host's resolver.
	DNS string
	// AllowAddresses are CIDRs the proxy may connect to although they are
	// private, loopback or link-local (an internal package mirror).
	AllowAddresses []string
	// Listen is a TCP address where the proxy also serves sandboxes that
	// reach it over the network (kubernetes Pods), authenticated per
	// sandbox; "" = off.
	Listen string
}

// Default returns the documented defaults: each component's own (its
// Default* constants, which its zero value also means), so `gateway -h`
// shows them and none is written twice.
func Default() Config {
	return Config{
		Listen:          "127.0.0.1:8080",
		DataDir:         "./.sandgate",
		ThreadDataQuota: -1,
		Checkpoints:     checkpoint.Config{Keep: checkpoint.DefaultKeep, MaxAge: checkpoint.DefaultMaxAge, UserThreads: checkpoint.DefaultUserThreads},
		RedisPrefix:     statedb.DefaultPrefix,
		Backend:         "process",
		ShutdownTimeout: 30 * time.Second,
		LogFormat:       "auto",
		LogLevel:        "info",

		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		BodyIdleTimeout:   router.DefaultBodyIdleTimeout,
		BodyTimeout:       serve.DefaultBodyTimeout,
		ServerImpl:        ImplSandgate,
		TransportImpl:     ImplSandgate,
		Limits: router.LimitsConfig{
			MaxRequests: router.DefaultMaxRequestsPerUser,
			CreateRate:  router.DefaultCreateRate,
		},
		Proxy: proxy.Config{
			MaxBodyBytes:  proxy.DefaultMaxBodyBytes,
			WSIdleTimeout: proxy.DefaultWSIdleTimeout,
			WSMaxLifetime: proxy.DefaultWSMaxLifetime,
			MaxUpgraded:   proxy.DefaultMaxUpgraded,
		},
		Pool: pool.Config{
			IdleTimeout:       pool.DefaultIdleTimeout,
			MaxSandboxes:      pool.DefaultMaxSandboxes,
			ProvisionWait:     pool.DefaultProvisionWait,
			CreateTimeout:     pool.DefaultCreateTimeout,
			CacheTTL:          pool.DefaultCacheTTL,
			PreviewMaxTTL:     pool.DefaultPreviewMaxTTL,
			TouchInterval:     pool.DefaultTouchInterval,
			ReapInterval:      pool.DefaultReapInterval,
			LockTTL:           statedb.DefaultLockTTL,
			ReconcileInterval: pool.DefaultReconcileInterval,
			ReconcileGrace:    pool.DefaultReconcileGrace,
			BusyIdleAfter:     sandboxspec.DefaultBusyIdleAfter,
			MaxLifetime:       pool.DefaultMaxLifetime,
			HealthInterval:    pool.DefaultHealthInterval,
			HealthTimeout:     pool.DefaultHealthTimeout,
			HealthFailures:    pool.DefaultHealthFailures,
			Fleet:             backend.DefaultFleet,
		},
		Process: ProcessConfig{Limits: jail.Limits{}.WithDefaults(), ImageGCGrace: imagestore.DefaultGCGrace},
		Docker: docker.Config{
			Image:           docker.DefaultImage,
			ContainerPrefix: docker.DefaultPrefix,
			Port:            docker.DefaultPort,
			Memory:          docker.DefaultMemory,
			NanoCPUs:        docker.DefaultNanoCPUs,
			PidsLimit:       docker.DefaultPidsLimit,
			PullPolicy:      docker.PullIfNotPresent,
		},
		Kubernetes: kubernetes.Config{
			URLMode:       kubernetes.URLService,
			ClusterDomain: kubernetes.DefaultClusterDomain,
			CPURequest:    kubernetes.DefaultCPURequest,
			CPULimit:      kubernetes.DefaultCPULimit,
			MemoryRequest: kubernetes.DefaultMemoryRequest,
			MemoryLimit:   kubernetes.DefaultMemoryLimit,
			// The Pods' egress proxy port and the gateway Pods' labels.
			EgressProxyPort:  kubernetes.DefaultEgressProxyPort,
			GatewayPodLabels: maps.Clone(kubernetes.DefaultGatewayPodLabels),
		},
	}
}

// KubernetesConfig is the kubernetes backend's configuration: its own
// settings plus the container settings it shares (image, port,
// container_prefix) and the instance name.
func (c Config) KubernetesConfig() kubernetes.Config {
	k := c.Kubernetes
	k.Image, k.Port, k.PodPrefix, k.Instance = c.Docker.Image, c.Docker.Port, c.Docker.ContainerPrefix, c.Pool.Instance
	return k
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen: %q is not host:port", c.Listen)
	}
	if c.DataDir == "" {
		return errors.New("data_dir: must be set")
	}
	if !contains(Backends, c.Backend) {
		return fmt.Errorf("backend: %q is not one of %s", c.Backend, strings.Join(Backends, ", "))
	}
	if err := c.Checkpoints.Validate(); err != nil {
		return fmt.Errorf("checkpoint_method: %w", err)
	}
	if c.RedisPrefix == "" {
		return errors.New("redis_prefix: must not be empty")
	}
	if c.RedisBuckets < 0 || c.RedisBuckets > 16384 {
		return errors.New("redis_buckets: must be 0 (the default) to 16384")
	}
	if c.ShutdownTimeout < 0 {
		return errors.New("shutdown_timeout: must not be negative")
	}
	if c.EgressDeniedEvery < 0 {
		return errors.New("egress_denied_every: must not be negative")
	}
	if !contains([]string{"json", "text", "auto"}, c.LogFormat) {
		return fmt.Errorf("log_format: %q is not json, text or auto", c.LogFormat)
	}
	if !contains([]string{"debug", "info", "warn", "error"}, c.LogLevel) {
		return fmt.Errorf("log_level: %q is not debug, info, warn or error", c.LogLevel)
	}
	if c.ReadHeaderTimeout <= 0 {
		return errors.New("read_header_timeout: must be positive")
	}
	if c.MaxHeaderBytes < 4<<10 || c.MaxHeaderBytes > 16<<20 {
		return errors.New("max_header_bytes: must be between 4k and 16m")
	}
	if _, err := router.NormalizeHostSuffix(c.HostSuffix); err != nil {
		return err
	}
	if _, err := router.NormalizeHostSuffix(c.PreviewSuffix); err != nil {
		return errors.New("preview_suffix: want a DNS name such as preview.example.com")
	}
	if _, err := router.NormalizeSandboxOrigin(c.SandboxOrigin); err != nil {
		return err
	}
	for _, h := range c.AllowedHosts {
		v6 := strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]")
		if h != "*" && (h == "" || strings.ContainsAny(h, "/@ ") || strings.Contains(h, ":") && !v6) {
			return fmt.Errorf("allowed_hosts: %q is not a host name (no scheme, port or path; [v6] in brackets)", h)
		}
	}
	if c.MetricsToken != "" && len(c.MetricsToken) < 16 {
		return errors.New("metrics_token: must be at least 16 characters (e.g. openssl rand -hex 32)")
	}
	if err := c.Auth.Validate(); err != nil {
		return err
	}
	if err := c.Limits.Streams.Validate(); err != nil {
		return err
	}
	if err := c.Conns.Validate(); err != nil {
		return err
	}
	if !contains(HTTPImpls, c.ServerImpl) {
		return fmt.Errorf("server_impl: %q is not %s", c.ServerImpl, strings.Join(HTTPImpls, " or "))
	}
	if !contains(HTTPImpls, c.TransportImpl) {
		return fmt.Errorf("transport_impl: %q is not %s", c.TransportImpl, strings.Join(HTTPImpls, " or "))
	}
	for i, m := range c.Pool.Mounts.Extra {
		if m.HostPath == "" || !strings.HasPrefix(m.ContainerPath, "/") {
			return fmt.Errorf("mounts[%d]: host_path and an absolute container_path are required", i)
		}
		if reserved(m.ContainerPath) {
			return fmt.Errorf("mounts[%d]: container_path %s is reserved", i, m.ContainerPath)
		}
	}
	if c.Backend == "process" && c.Process.Isolation == process.IsolationNone && c.Auth.Enabled() {
		return errors.New("process_isolation: none runs every sandbox as the gateway's own user, with its files and " +
			"network, and authentication is configured (several users): refusing; keep process_isolation: namespaces " +
			"or use a container backend")
	}
	if g := c.Process.ImageGCGrace; g > 0 && g < imagestore.MinGCGrace {
		return fmt.Errorf("process_image_gc_grace: %s is under %s, the bound of one import: an import in progress could be collected", g, imagestore.MinGCGrace)
	}
	if c.Process.Image != "" && c.Process.Isolation == process.IsolationNone {
		return errors.New("process_image: the image's userland replaces the host's inside the jail, and " +
			"process_isolation: none has no jail; keep process_isolation: namespaces or drop process_image")
	}
	if c.Backend == "process" && c.Process.Isolation == process.IsolationNone {
		for name := range c.TemplateSources() {
			return fmt.Errorf("templates: %s has an image, whose userland replaces the host's inside the jail, and "+
				"process_isolation: none has no jail; keep process_isolation: namespaces", name)
		}
	}
	if err := (process.Config{StateDir: c.DataDir, Isolation: c.Process.Isolation}).Validate(); err != nil {
		return err
	}
	if err := c.Docker.Validate(); err != nil {
		return err
	}
	if err := c.Pool.Egress.Validate(); err != nil {
		return err
	}
	for _, a := range c.Egress.AllowAddresses {
		if _, err := netip.ParsePrefix(a); err != nil {
			return fmt.Errorf("egress_allow_addresses: %q is not a CIDR such as 10.1.2.0/24", a)
		}
	}
	for _, a := range c.WebhookAllowAddresses {
		if p, err := netip.ParsePrefix(a); err != nil || p.Masked() != p {
			return fmt.Errorf("webhook_allow_addresses: %q is not a CIDR such as 127.0.0.1/32", a)
		}
	}
	if err := c.Webhooks.Validate(); err != nil {
		return fmt.Errorf("webhooks: %w", err)
	}
	if c.Egress.DNS != "" {
		if _, err := netip.ParseAddrPort(c.Egress.DNS); err != nil {
			return fmt.Errorf("egress_dns: %q is not ip:port", c.Egress.DNS)
		}
	}
	if c.Egress.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Egress.Listen); err != nil {
			return fmt.Errorf("egress_listen: %q is not host:port", c.Egress.Listen)
		}
	}
	// Only the backend in use: the others' rules (a DNS-safe prefix, a
	// provisioner URL) would refuse settings that suit the chosen one.
	switch c.Backend {
	case "kubernetes":
		k := c.KubernetesConfig()
		if err := k.Validate(); err != nil {
			return err
		}
		if err := k.Prewarmable(); c.Pool.Prewarm > 0 && err != nil {
			return fmt.Errorf("prewarm: %w, or prewarm: 0", err)
		}
	case "remote":
		if err := c.Remote.Validate(); err != nil {
			return err
		}
	}
	return c.Pool.Validate()
}

// DefaultDrainDelay is the drain delay of a non-loopback listener: long
// enough for a balancer polling /readyz every few seconds to see it fail,
// short enough not to slow a rolling restart; a balancer that polls less
// often needs a longer drain_delay.
const DefaultDrainDelay = 5 * time.Second

// EffectiveDrainDelay is drain_delay, or when unset 5 s on a non-loopback
// listener and none on loopback: no balancer stands in front of a loopback
// address, and tests stop many gateways that way.
func (c Config) EffectiveDrainDelay() time.Duration {
	switch {
	case c.DrainDelay < 0:
		return 0
	case c.DrainDelay > 0:
		return c.DrainDelay
	case c.Loopback():
		return 0
	}
	return DefaultDrainDelay
}

// Loopback reports whether the listen address only accepts local clients.
func (c Config) Loopback() bool {
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func reserved(p string) bool {
	for _, v := range []string{backend.VirtualUserData, backend.VirtualSkills, backend.VirtualACPWorkspace} {
		if p == v || strings.HasPrefix(p, v+"/") {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
