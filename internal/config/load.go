package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sandgate/sandgate/internal/backend"
)

// EnvPrefix starts every environment variable name.
const EnvPrefix = "SANDGATE_"

// ConfigEnv names the YAML file.
const ConfigEnv = "SANDGATE_CONFIG"

type setting struct {
	name  string // flag name; env and YAML names derive from it
	usage string
	value flag.Value
}

func (s setting) envName() string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(s.name, "-", "_"))
}
func (s setting) yamlName() string { return strings.ReplaceAll(s.name, "-", "_") }

// settings binds every scalar setting of c to its names.
func (c *Config) settings() []setting {
	p, d, k, r := &c.Pool, &c.Docker, &c.Kubernetes, &c.Remote
	return []setting{
		{"listen", "address to listen on", (*stringValue)(&c.Listen)},
		{"insecure", "allow a non-loopback listen address without authentication", (*boolValue)(&c.Insecure)},
		{"data-dir", "directory for thread data and backend state", (*stringValue)(&c.DataDir)},
		{"thread-data-quota", "soft limit on one thread's data under data-dir, e.g. 10g: measured, reported, file-API writes refused over it (0 = none)", (*offBytes)(&c.ThreadDataQuota)},
		{"redis-url", "Redis URL (redis://, rediss://, sentinel, cluster); empty = embedded, not durable", (*stringValue)(&c.RedisURL)},
		{"redis-prefix", "key prefix (braces are dropped: Sandgate places its own hash tags)", (*stringValue)(&c.RedisPrefix)},
		{"redis-buckets", "how many buckets the indexes are split into; keep it for the life of the prefix's state (0 = 64)", (*intValue)(&c.RedisBuckets)},
		{"backend", "sandbox backend: " + strings.Join(Backends, " | "), (*stringValue)(&c.Backend)},
		{"public-url", "URL clients use to reach this gateway (empty = from each request)", (*stringValue)(&c.PublicURL)},
		{"shutdown-timeout", "how long a draining gateway waits for requests", (*durationValue)(&c.ShutdownTimeout)},
		{"log-format", "json | text | auto (text on a terminal)", (*stringValue)(&c.LogFormat)},
		{"log-level", "debug | info | warn | error", (*stringValue)(&c.LogLevel)},
		{"instance", "name of this replica in labels and logs (empty = hostname-pid)", (*stringValue)(&p.Instance)},
		{"fleet", "this fleet's name, the sandgate.fleet label on every sandbox; reconciler and prune touch only its own", (*stringValue)(&p.Fleet)},
		{"idle-timeout", "destroy sandboxes idle this long (0 = never)", (*offDuration)(&p.IdleTimeout)},
		{"max-sandboxes", "fleet-wide cap on sandboxes (0 = no cap)", (*offInt)(&p.MaxSandboxes)},
		{"cap-mode", "soft (evict warm, else exceed with a warning) | hard (503)", (*capMode)(&p.HardCap)},
		{"max-sandboxes-per-user", "fleet-wide cap on one user's sandboxes, 429 past it; admins exempt (unset = 8 with authentication, none without; 0 = no cap)", &setInt{&p.MaxSandboxesPerUser, &c.perUserSet.sandboxes}},
		{"max-creates-per-user", "fleet-wide cap on one user's creates in progress, 429 past it; admins exempt (unset = 4 with authentication, none without; 0 = no cap)", &setInt{&p.MaxCreatesPerUser, &c.perUserSet.creates}},
		{"acquire-timeout", "hard cap: how long a create waits for room before 503", (*durationValue)(&p.AcquireTimeout)},
		{"provision-wait", "how long a request waits for its sandbox before 503 + Retry-After (0 = the default)", (*durationValue)(&p.ProvisionWait)},
		{"create-timeout", "bound on one backend create incl. readiness (0 = the default)", (*durationValue)(&p.CreateTimeout)},
		{"cache-ttl", "how long a replica trusts a cached route (0 = the default)", (*durationValue)(&p.CacheTTL)},
		{"touch-interval", "how often activity is flushed to Redis (0 = the default)", (*durationValue)(&p.TouchInterval)},
		{"reap-interval", "how often expired sandboxes are looked for (0 = the default)", (*durationValue)(&p.ReapInterval)},
		{"lock-ttl", "provisioning lock TTL, refreshed while held (0 = the default)", (*durationValue)(&p.LockTTL)},
		{"reconcile-interval", "how often backend sandboxes are compared with Redis (0 = never)", (*offDuration)(&p.ReconcileInterval)},
		{"reconcile-grace", "age before an unrecorded sandbox is adopted (0 = the default)", (*durationValue)(&p.ReconcileGrace)},
		{"reconcile-dry-run", "log what the reconciler would do, do nothing", (*boolValue)(&p.ReconcileDryRun)},
		{"bucket-lease-ttl", "how long a replica's lease on a bucket (its share of reaping and reconciling) outlives it (0 = the default)", (*durationValue)(&p.BucketLeaseTTL)},
		{"prewarm", "pre-started sandboxes kept ready fleet-wide for new threads' first requests (process and docker backends; 0 = none)", (*intValue)(&p.Prewarm)},
		{"pause-warm", "pause warm sandboxes (process, docker) and unpause them on reclaim", (*boolValue)(&p.PauseWarm)},
		{"checkpoint-keep", "workspace checkpoints kept per thread, newest first (0 = no limit)", (*offInt)(&c.Checkpoints.Keep)},
		{"checkpoint-max-age", "drop workspace checkpoints older than this (0 = never)", (*offDuration)(&c.Checkpoints.MaxAge)},
		{"checkpoint-user-bytes", "disk one user's checkpoints and thread data may take before a checkpoint or fork is refused (507), e.g. 20g (default a quarter of data-dir's filesystem; 0 = no limit)", (*offBytes)(&c.Checkpoints.UserBytes)},
		{"checkpoint-user-inodes", "files one user's checkpoints and thread data may hold before a checkpoint or fork is refused (default a quarter of data-dir's inodes; 0 = no limit)", (*offInt)(&c.Checkpoints.UserInodes)},
		{"checkpoint-user-threads", "threads with data one user may have before a new thread's sandbox or a fork onto one is refused (default 1000; 0 = no limit)", (*offInt)(&c.Checkpoints.UserThreads)},
		{"checkpoint-free-floor", "free space a checkpoint or fork must leave on data-dir's filesystem (default 1g, or a tenth of a smaller filesystem; 0 = none)", (*offBytes)(&c.Checkpoints.FreeFloor)},
		{"checkpoint-method", "how checkpoints copy files: empty = detect (reflink where the data_dir's filesystem can, else copy) | reflink | copy", (*stringValue)(&c.Checkpoints.Method)},
		{"max-lifetime", "destroy a sandbox this long after it was created, busy or not (0 = never)", (*offDuration)(&p.MaxLifetime)},
		{"busy-idle-after", "a running command that used no CPU and wrote no output this long no longer keeps its sandbox from being frozen or reaped; a stopped one never does (0 = only a stop ends busy)", (*offDuration)(&p.BusyIdleAfter)},
		{"freeze-after", "freeze a sandbox (process, docker) with no request and no running command for this long: processes stopped, memory kept, thawed by its next request on any replica (0 = never)", (*durationValue)(&p.FreezeAfter)},
		{"skills-dir", "host dir mounted read-only at /mnt/skills", (*stringValue)(&p.Mounts.SkillsDir)},
		{"acp-workspace", "host dir mounted read-only at /mnt/acp-workspace", (*stringValue)(&p.Mounts.ACPWorkspace)},
		{"sandbox-api-key", "shared API key sent as X-AIO-API-Key to sandboxes without a secret of their own (third-party images)", (*stringValue)(&c.Proxy.SandboxAPIKey)},
		{"auth-api-keys", "static API keys: name=sha256hex[:threads+admin],... (sha256 of the key, never the key)", (*apiKeysValue)(&c.Auth.APIKeys)},
		{"auth-jwt-hs256-secret", "HS256 secret of bearer JWTs (32 bytes or more)", (*stringValue)(&c.Auth.JWT.HS256Secret)},
		{"auth-jwt-public-key-file", "PEM public key verifying RS256/ES256 bearer JWTs", (*stringValue)(&c.Auth.JWT.PublicKeyFile)},
		{"auth-jwt-jwks-url", "JWKS URL of the token issuer (cached, refreshed hourly and on an unknown kid)", (*stringValue)(&c.Auth.JWT.JWKSURL)},
		{"auth-jwt-issuer", "required iss of JWTs (empty = any)", (*stringValue)(&c.Auth.JWT.Issuer)},
		{"auth-jwt-audience", "required aud of JWTs (required with JWT auth unless auth-jwt-any-audience)", (*stringValue)(&c.Auth.JWT.Audience)},
		{"auth-jwt-any-audience", "accept JWTs minted for any audience (opt-out of auth-jwt-audience)", (*boolValue)(&c.Auth.JWT.AnyAudience)},
		{"auth-jwt-admin-claim", "JWT claim (name or dotted path) that makes a token an admin when it holds auth-jwt-admin-value (empty = no JWT is an admin)", (*stringValue)(&c.Auth.JWT.AdminClaim)},
		{"auth-jwt-admin-value", "value of auth-jwt-admin-claim that makes a token an admin", (*stringValue)(&c.Auth.JWT.AdminValue)},
		{"auth-jwt-leeway", "clock skew allowed on exp and nbf (at most 5m)", (*durationValue)(&c.Auth.JWT.Leeway)},
		{"allowed-hosts", "without auth, host names served besides localhost, 127.0.0.1, [::1], public-url's and host-suffix's, comma separated (* = any: no DNS-rebinding check)", (*listValue)(&c.AllowedHosts)},
		{"metrics-token", "bearer token that opens /metrics and nothing else (Prometheus with auth on; 16+ characters)", (*stringValue)(&c.MetricsToken)},
		{"host-suffix", "host routing: {sandbox_id}.{suffix} reaches a sandbox on any path (empty = off)", (*stringValue)(&c.HostSuffix)},
		{"max-body-bytes", "largest request body, counted as it streams (0 = no limit)", (*offBytes)(&c.Proxy.MaxBodyBytes)},
		{"max-header-bytes", "largest request header block", (*intValue)(&c.MaxHeaderBytes)},
		{"read-header-timeout", "how long a client may take to send its request headers", (*durationValue)(&c.ReadHeaderTimeout)},
		{"body-idle-timeout", "cut a proxied request (408) whose body makes no progress this long (0 = never)", (*offDuration)(&c.BodyIdleTimeout)},
		{"body-timeout", "a request body the gateway reads itself (status login, checkpoints, fork, MCP) must arrive within this long of its headers (0 = never)", (*offDuration)(&c.BodyTimeout)},
		{"max-connections", "client connections open at once (0 = half the descriptor limit); past it new ones wait in the listen backlog", (*intValue)(&c.Conns.Max)},
		{"max-connections-per-source", "client connections one source address (an IPv6 /64) may hold open; past it they are closed (0 = a quarter of max-connections)", (*intValue)(&c.Conns.PerSource)},
		{"server-impl", "HTTP server of the gateway: sandgate (its own, the default) | net/http (the standard library's: a fallback should a bug be found in Sandgate's request parser)", (*stringValue)(&c.ServerImpl)},
		{"transport-impl", "HTTP client the proxy reaches sandboxes with: sandgate (its own, the default) | net/http (the standard library's http.Transport: a fallback should a bug be found in Sandgate's)", (*stringValue)(&c.TransportImpl)},
		{"max-requests-per-user", "requests in flight per user and replica, WebSockets included (0 = no cap)", (*offInt)(&c.Limits.MaxRequests)},
		{"create-rate", "sandboxes created per user, fleet-wide: N/duration, e.g. 60/1m (0 = no limit)", (*rateValue)(&c.Limits.CreateRate)},
		{"max-streams-per-user", "event streams of each kind (status page, provisioning progress) one non-admin user may hold open per replica, 429 past it (0 = 8)", (*intValue)(&c.Limits.Streams.PerUser)},
		{"admin-streams", "of each replica's 256 event streams, how many only admins may take (0 = 32)", (*intValue)(&c.Limits.Streams.AdminReserve)},
		{"forward-cookies", "pass clients' Cookie headers to sandboxes and their Set-Cookie back (off: neither crosses; sandbox responses are on the gateway's origin)", (*boolValue)(&c.Proxy.ForwardCookies)},
		{"ws-idle-timeout", "close an upgraded connection silent this long (0 = never)", (*offDuration)(&c.Proxy.WSIdleTimeout)},
		{"ws-max-lifetime", "close an upgraded connection this long after it opened (0 = never)", (*offDuration)(&c.Proxy.WSMaxLifetime)},
		{"max-upgraded", "upgraded (WebSocket) connections open at once per replica (0 = no cap)", (*offInt)(&c.Proxy.MaxUpgraded)},
		{"process-binary", "sandbox server binary for the process backend (empty = this binary)", (*stringValue)(&c.Process.Binary)},
		{"process-isolation", "namespaces: each process sandbox in its own user, mount, PID, network, IPC and UTS namespaces with Landlock, seccomp and limits; none: a plain child process of the gateway's user (one trusted user only; refused with auth)", (*stringValue)(&c.Process.Isolation)},
		{"process-memory", "memory limit per isolated process sandbox (cgroup, else RLIMIT_AS), e.g. 512m, 2g (0 = none)", (*offBytes)(&c.Process.Limits.Memory)},
		{"process-pids-limit", "processes and threads per isolated process sandbox (0 = none)", (*offInt)(&c.Process.Limits.Processes)},
		{"process-open-files", "open files per process in an isolated process sandbox (0 = none)", (*offInt)(&c.Process.Limits.OpenFiles)},
		{"process-file-size", "largest file a process in an isolated sandbox may write (0 = none)", (*offBytes)(&c.Process.Limits.FileSize)},
		{"process-tmp-size", "size of an isolated process sandbox's private /tmp", (*offBytes)(&c.Process.Limits.TmpSize)},
		{"egress", "what sandboxes reach outside: proxy (only allow-listed domains, through the gateway's egress proxy) | none | open (anything but other sandboxes; trusted code only)", (*egressModeValue)(&p.Egress.Mode)},
		{"egress-allow", "domains the egress proxy lets through, comma separated: example.com, *.example.com (names below it), optionally :port", (*listValue)(&p.Egress.Allow)},
		{"egress-dns", "DNS server (ip:port) the egress proxy resolves with (empty = the host's resolver)", (*stringValue)(&c.Egress.DNS)},
		{"egress-allow-addresses", "CIDRs the egress proxy may connect to although private, loopback or link-local (an internal mirror), comma separated", (*listValue)(&c.Egress.AllowAddresses)},
		{"egress-listen", "TCP address where the egress proxy also serves networked sandboxes (kubernetes), authenticated per sandbox (empty = off)", (*stringValue)(&c.Egress.Listen)},
		{"image", "sandbox image of the container backends", &setString{&d.Image, &c.imageSet}},
		{"container-prefix", "container name prefix: {prefix}-{sandbox_id}", (*stringValue)(&d.ContainerPrefix)},
		{"port", "port the sandbox server listens on inside a container", (*intValue)(&d.Port)},
		{"docker-host", "Docker engine address (empty = DOCKER_HOST, else the local socket)", (*stringValue)(&d.Host)},
		{"docker-network", "attach sandboxes to this Docker network and reach them by name (gateway in a container); nothing is published", (*stringValue)(&d.Network)},
		{"docker-open-network", "Docker network of sandboxes whose egress is open (a bridge with inter-container traffic off, created when first needed)", (*stringValue)(&d.OpenNetwork)},
		{"docker-memory", "memory limit per sandbox, e.g. 512m, 2g (0 = none)", (*offBytes)(&d.Memory)},
		{"docker-cpus", "CPU limit per sandbox, e.g. 0.5, 2 (0 = none)", (*offCPUs)(&d.NanoCPUs)},
		{"docker-pids-limit", "process and thread limit per sandbox (0 = none)", (*offInt)(&d.PidsLimit)},
		{"docker-seccomp-unconfined", "run sandboxes without seccomp (the all-in-one image's browser needs it); logged as a warning", (*boolValue)(&d.SeccompUnconfined)},
		{"docker-cap-add", "capabilities given back after all are dropped, comma separated (e.g. CHOWN,SETUID,SETGID)", (*listValue)(&d.CapAdd)},
		{"docker-user", "user sandboxes run as: uid:gid or name; empty = a host uid of each sandbox's own, never the gateway's; image = the image's USER", (*stringValue)(&d.User)},
		{"docker-disk-limit", "writable-layer size limit per sandbox, e.g. 10g (0 = none; needs a storage driver that supports it)", (*offBytes)(&d.DiskLimit)},
		{"docker-pull-policy", "always | if-not-present | never", (*stringValue)(&d.PullPolicy)},
		{"kubernetes-kubeconfig", "kubeconfig file of the kubernetes backend; empty = in-cluster service account", (*stringValue)(&k.Kubeconfig)},
		{"kubernetes-namespace", "namespace of sandbox Pods (empty = the kubeconfig context's, else the gateway Pod's)", (*stringValue)(&k.Namespace)},
		{"kubernetes-url-mode", "how the gateway reaches sandbox Pods: service | nodeport | pod-ip", (*stringValue)(&k.URLMode)},
		{"kubernetes-node-host", "node address for url mode nodeport (gateway outside the cluster)", (*stringValue)(&k.NodeHost)},
		{"kubernetes-cluster-domain", "cluster DNS domain of Service URLs", (*stringValue)(&k.ClusterDomain)},
		{"kubernetes-cpu-request", "CPU request per sandbox Pod", (*stringValue)(&k.CPURequest)},
		{"kubernetes-cpu-limit", "CPU limit per sandbox Pod", (*stringValue)(&k.CPULimit)},
		{"kubernetes-memory-request", "memory request per sandbox Pod", (*stringValue)(&k.MemoryRequest)},
		{"kubernetes-memory-limit", "memory limit per sandbox Pod", (*stringValue)(&k.MemoryLimit)},
		{"kubernetes-runtime-class", "RuntimeClass of sandbox Pods, e.g. gvisor or kata", (*stringValue)(&k.RuntimeClass)},
		{"kubernetes-egress-proxy-url", "egress proxy URL sandbox Pods use, http://host:port (empty = the sandgate-egress Service of the namespace)", (*stringValue)(&k.EgressProxyURL)},
		{"kubernetes-egress-proxy-port", "gateway Pods' egress proxy port the per-sandbox NetworkPolicy opens", (*intValue)(&k.EgressProxyPort)},
		{"kubernetes-gateway-pod-labels", "labels of the gateway Pods, key=value,...", (*mapValue)(&k.GatewayPodLabels)},
		{"kubernetes-node-selector", "node labels sandbox Pods must match: key=value,...", (*mapValue)(&k.NodeSelector)},
		{"kubernetes-tolerations", "taints sandbox Pods tolerate: key[=value][:Effect],... (* = every taint)", (*tolerationsValue)(&k.Tolerations)},
		{"kubernetes-image-pull-policy", "Always | IfNotPresent | Never (empty = Kubernetes')", (*stringValue)(&k.ImagePullPolicy)},
		{"kubernetes-image-pull-secrets", "image pull secrets of sandbox Pods, comma separated", (*listValue)(&k.ImagePullSecrets)},
		{"kubernetes-active-deadline", "sandbox Pods end after this long whatever happens, a backstop (0 = never)", (*durationValue)(&k.ActiveDeadline)},
		{"kubernetes-run-as-non-root", "refuse sandbox images that run as root", (*boolValue)(&k.RunAsNonRoot)},
		{"kubernetes-user-data-pvc", "PVC holding thread data at users/{user}/threads/{thread}/user-data", (*stringValue)(&k.UserDataPVC)},
		{"kubernetes-user-data-host-path", "node directory holding thread data, instead of a PVC", (*stringValue)(&k.UserDataHostPath)},
		{"kubernetes-skills-pvc", "PVC mounted read-only at /mnt/skills", (*stringValue)(&k.SkillsPVC)},
		{"kubernetes-skills-host-path", "node directory mounted read-only at /mnt/skills", (*stringValue)(&k.SkillsHostPath)},
		{"provisioner-url", "DeerFlow-compatible provisioner of the remote backend", (*stringValue)(&r.URL)},
		{"provisioner-api-key", "X-API-Key sent to the provisioner", (*stringValue)(&r.APIKey)},
		{"provisioner-sandbox-hosts", "hosts besides the provisioner's own that its sandbox_urls may name (any port; * = any), comma separated", (*listValue)(&r.SandboxHosts)},
	}
}

// deerflowKeys maps DeerFlow's `sandbox:` keys onto ours.
var deerflowKeys = map[string]string{
	"idle_timeout":        "idle_timeout",
	"replicas":            "max_sandboxes",
	"mounts":              "mounts",
	"environment":         "environment",
	"image":               "image",
	"port":                "port",
	"container_prefix":    "container_prefix",
	"provisioner_url":     "provisioner_url",
	"provisioner_api_key": "provisioner_api_key",
}

// nestedAliases let a nested `docker:` block name the container settings
// too: docker: {image: x} is image.
var nestedAliases = map[string]string{
	"docker_image":            "image",
	"docker_port":             "port",
	"docker_container_prefix": "container_prefix",
}

// deerflowIgnored are DeerFlow keys with no meaning here (logged, not errors).
var deerflowIgnored = map[string]string{
	"use":        "Sandgate is the provider",
	"auto_start": "sandboxes always start on demand",
	"base_port":  "ports are chosen by the kernel/engine, never scanned",
}

// Load builds the configuration: defaults, then the YAML file, then
// SANDGATE_* variables, then flags. Warnings are for keys that were ignored.
func Load(args []string, lookupEnv func(string) (string, bool), usage io.Writer) (Config, []string, error) {
	c := Default()
	fs := flag.NewFlagSet("gateway serve", flag.ContinueOnError)
	// The flag package would print a bad flag's error and then the whole
	// usage; the caller prints the error once, with a hint (UsageError).
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	settings := c.settings()
	for _, s := range settings {
		fs.Var(s.value, s.name, s.usage+" (env "+s.envName()+")")
	}
	configPath := fs.String("config", "", "YAML config file (env "+ConfigEnv+")")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(usage, fs)
			return c, nil, err
		}
		return c, nil, &UsageError{err}
	}
	if fs.NArg() > 0 {
		return c, nil, &UsageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	fromFlag := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { fromFlag[f.Name] = true })

	var warnings []string
	path := *configPath
	if path == "" {
		path, _ = lookupEnv(ConfigEnv)
	}
	if path != "" {
		w, err := c.applyYAML(path, settings, fromFlag, lookupEnv)
		if err != nil {
			return c, nil, err
		}
		warnings = w
	}
	for _, s := range settings {
		if v, ok := lookupEnv(s.envName()); ok && !fromFlag[s.name] {
			if err := s.value.Set(v); err != nil {
				return c, nil, fmt.Errorf("%s: %w", s.envName(), err)
			}
		}
	}
	c.Pool.Mounts.DataDir = c.DataDir
	c.multiUserDefaults()
	if err := c.Validate(); err != nil {
		return c, nil, err
	}
	return c, warnings, nil
}

// yamlFile holds what does not fit a scalar setting.
type yamlFile struct {
	Mounts      []backend.Mount   `yaml:"mounts"`
	Environment map[string]string `yaml:"environment"`
	Labels      map[string]string `yaml:"labels"`
}

func (c *Config) applyYAML(path string, settings []setting, fromFlag map[string]bool, lookupEnv func(string) (string, bool)) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	flat := map[string]any{}
	var warnings []string
	if sb, ok := doc["sandbox"].(map[string]any); ok {
		delete(doc, "sandbox")
		for k, v := range sb {
			if ours, ok := deerflowKeys[k]; ok {
				flat[ours] = v
			} else if why, ok := deerflowIgnored[k]; ok {
				warnings = append(warnings, fmt.Sprintf("sandbox.%s ignored: %s", k, why))
			} else {
				warnings = append(warnings, fmt.Sprintf("sandbox.%s: unknown DeerFlow key, ignored", k))
			}
		}
	}
	flatten("", doc, flat)
	for nested, ours := range nestedAliases {
		if v, ok := flat[nested]; ok {
			delete(flat, nested)
			flat[ours] = v
		}
	}

	// Structured keys decode through their own types.
	var structured yamlFile
	part := map[string]any{}
	for _, k := range []string{"mounts", "environment", "labels"} {
		if v, ok := flat[k]; ok {
			part[k] = v
			delete(flat, k)
		}
	}
	if len(part) > 0 {
		b, _ := yaml.Marshal(part)
		if err := yaml.Unmarshal(b, &structured); err != nil {
			return nil, fmt.Errorf("config file %s: mounts/environment/labels: %w", path, err)
		}
	}
	c.Pool.Mounts.Extra = append(c.Pool.Mounts.Extra, structured.Mounts...)
	if len(structured.Environment) > 0 {
		c.Pool.Env = resolveEnv(structured.Environment, lookupEnv)
	}
	if len(structured.Labels) > 0 {
		c.Pool.Labels = structured.Labels
	}

	byYAML := map[string]setting{}
	for _, s := range settings {
		byYAML[s.yamlName()] = s
	}
	keys := make([]string, 0, len(flat))
	for k := range flat {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s, ok := byYAML[k]
		if !ok {
			warnings = append(warnings, fmt.Sprintf("%s: not used by this gateway, ignored", k))
			continue
		}
		if fromFlag[s.name] {
			continue
		}
		if err := s.value.Set(scalar(flat[k])); err != nil {
			return nil, fmt.Errorf("config file %s: %s: %w", path, k, err)
		}
	}
	return warnings, nil
}

// mapSettings take a YAML map as their value rather than nesting.
var mapSettings = map[string]bool{"environment": true, "labels": true, "kubernetes_node_selector": true}

// flatten turns nested maps into underscore-joined keys (docker: {image: x}
// becomes docker_image), so nested and flat YAML both work.
func flatten(prefix string, m map[string]any, out map[string]any) {
	for k, v := range m {
		key := k
		if prefix != "" {
			key = prefix + "_" + k
		}
		if sub, ok := v.(map[string]any); ok && !mapSettings[key] {
			flatten(key, sub, out)
			continue
		}
		out[key] = v
	}
}

func scalar(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case time.Duration:
		return t.String()
	case map[string]any: // a YAML map for a map setting: kubernetes_node_selector: {pool: sandbox}
		items := make([]string, 0, len(t))
		for k, v := range t {
			items = append(items, k+"="+fmt.Sprint(v))
		}
		sort.Strings(items)
		return strings.Join(items, ",")
	case []any: // a YAML list for a list setting: docker_cap_add: [CHOWN, SETUID]
		items := make([]string, len(t))
		for i, item := range t {
			items[i] = fmt.Sprint(item)
		}
		return strings.Join(items, ",")
	default:
		return fmt.Sprint(t)
	}
}

// resolveEnv expands $VAR and ${VAR} values from the gateway's environment,
// as DeerFlow does; a missing variable becomes empty.
func resolveEnv(in map[string]string, lookupEnv func(string) (string, bool)) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = os.Expand(v, func(name string) string {
			val, _ := lookupEnv(name)
			return val
		})
	}
	return out
}

// IsHelp reports whether err is a request for usage.
func IsHelp(err error) bool { return errors.Is(err, flag.ErrHelp) }

// UsageError is a bad command line (an unknown flag, a bad value): the
// caller prints it with UsageHint and exits 2, as the flag package would.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// UsageHint follows a UsageError.
const UsageHint = "run 'gateway -h' for usage"

// printUsage lists every flag with its default, which the flag package
// leaves out when it is the type's zero value (0 that means 30s, "soft").
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: gateway [serve] [flags]\n\nEvery flag is also an environment variable (SANDGATE_NAME) and a key of the YAML file (name).\n\n")
	fs.VisitAll(func(f *flag.Flag) {
		kind, def := kindOf(f.Value), f.DefValue
		if kind == "string" || def == "" {
			def = strconv.Quote(def)
		}
		name := f.Name
		if kind != "" {
			name += " " + kind
		}
		fmt.Fprintf(w, "  -%s\n    \t%s (default %s)\n", name, f.Usage, def)
	})
}

// kindOf names what a flag takes, for the usage.
func kindOf(v flag.Value) string {
	switch v.(type) {
	case *boolValue:
		return ""
	case *durationValue, *offDuration:
		return "duration"
	case *intValue, *offInt, *setInt:
		return "int"
	case *offBytes:
		return "size"
	case *offCPUs:
		return "cpus"
	case *listValue, *apiKeysValue, *tolerationsValue:
		return "list"
	case *mapValue:
		return "key=value,..."
	case *rateValue:
		return "N/duration"
	}
	return "string"
}
