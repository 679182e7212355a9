package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/redis/go-redis/v9"
	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/kubernetes"
	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/testutil"
)

func init() { register("kube", kubeSuite) }

const (
	// kubeWarmups are creates and first requests not counted: the image's
	// layers in the page cache, the node's and the API server's caches warm.
	kubeWarmups = 2
	// kubeUserDataPVC and kubeSkillsPVC are the claims the Pods mount, as
	// in the backend's real-node tests.
	kubeUserDataPVC = "sandgate-data"
	kubeSkillsPVC   = "skills"
	// kubeBurner keeps one CPU busy in the frozen sandbox, detached from
	// the exec that starts it.
	kubeBurner = "setsid sh -c 'while :; do :; done' >/dev/null 2>&1 </dev/null &"

	figKubeCreateP50 = "kube.create.p50_ms"
	figKubeCreateP99 = "kube.create.p99_ms"
	figKubeFreezeP50 = "kube.freeze.p50_ms"
	figKubeThawP50   = "kube.thaw.p50_ms"
	figKubeThawP99   = "kube.thaw.p99_ms"
	figKubeFirstP50  = "kube.first_request.p50_ms"
	figKubeCkptP50   = "kube.checkpoint_100mb.p50_ms"
	figKubeClaimP50  = "kube.prewarmed_first_request.p50_ms"
	figKubeClaimP99  = "kube.prewarmed_first_request.p99_ms"
)

// kubeBench is the suite's namespace on a real single node
// (testutil.StartKubeNodeMain: containerd, runc, the CNI bridge, kubelet,
// scheduler, controller manager), set up as the backend's real-node tests
// set theirs up: the restricted Pod Security Standard enforced, a
// kubeconfig restricted to deployments/kubernetes/rbac.yaml's Role, user
// data and skills on hostPath-backed PVCs.
type kubeBench struct {
	env        *suiteEnv
	api        *testutil.KubeAPI
	node       *testutil.KubeNode
	ns         string
	kubeconfig string
}

// kubeSuite measures the kubernetes backend on the real node: cold create
// to the first answer, freeze and thaw through Sandgate's server in the
// Pod, and a new thread's first request through a gateway replica.
func kubeSuite(ctx context.Context) (Result, error) {
	env, err := startSuiteEnv(ctx, "kube")
	if err != nil {
		return Result{}, err
	}
	defer env.close()
	image, err := testutil.BuildSandboxImage(ctx, process.SandboxBinary(env.bin))
	if err != nil {
		return Result{}, err
	}
	api, node, stop, err := testutil.StartKubeNodeMain(image)
	if err != nil {
		return Result{}, err
	}
	env.cleanup.push(func(context.Context) { stop() })
	kb := &kubeBench{env: env, api: api, node: node}
	if err := kb.setup(ctx); err != nil {
		return Result{}, err
	}
	k, err := kubernetes.New(ctx, kb.config(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return Result{}, err
	}
	env.cleanup.push(func(context.Context) { _ = k.Close() })
	be := k.Backend()

	create, deleted, gone, err := kb.coldCreates(ctx, be)
	if err != nil {
		return Result{}, fmt.Errorf("cold create: %w", err)
	}
	ft, err := kb.freezeThaw(ctx, be)
	if err != nil {
		return Result{}, fmt.Errorf("freeze: %w", err)
	}
	first, ckpt, err := kb.gatewayFirst(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("gateway: %w", err)
	}
	claims, err := kb.prewarmedFirst(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("prewarmed: %w", err)
	}

	cs, fs, ts, gs, ks, ps := summarize(create), summarize(ft.freeze), summarize(ft.thaw), summarize(first), summarize(ckpt), summarize(claims)
	res := Result{
		Title:   "Kubernetes backend on a real node: cold create, freeze and thaw, first request",
		Columns: statsColumns,
		Rows: [][]string{
			statsRow("Create: Secret + Pod + NetworkPolicy + Service → container running → first 200 from the server (pod-ip)", cs),
			statsRow("Destroy: Pod deleted (the API server accepted it)", summarize(deleted)),
			statsRow("Destroy → the Pod gone from the API (the kubelet stopped it)", summarize(gone)),
			statsRow("Freeze through Sandgate's server in the Pod (SIGSTOP of its commands; a CPU burner runs)", fs),
			statsRow("Thaw through Sandgate's server in the Pod (SIGCONT)", ts),
			statsRow("new thread: first GET /threads/{t}/v1/sandbox through a gateway replica (kubernetes cold create)", gs),
			statsRow(fmt.Sprintf("new thread: first GET /threads/{t}/v1/sandbox claiming a pre-started Pod (--prewarm %d)", kubePrewarm), ps),
			statsRow("checkpoint of a 100 MB workspace through the gateway (freeze, copy on the volume, thaw)", ks),
		},
		Figures: map[string]float64{figKubeCreateP50: msF(cs.P50), figKubeCreateP99: msF(cs.P99),
			figKubeFreezeP50: msF(fs.P50), figKubeThawP50: msF(ts.P50), figKubeThawP99: msF(ts.P99), figKubeFirstP50: msF(gs.P50), figKubeCkptP50: msF(ks.P50),
			figKubeClaimP50: msF(ps.P50), figKubeClaimP99: msF(ps.P99)},
	}
	refs, missing := kubeReferences()
	res.Rows = append(res.Rows, refs...)
	res.Notes = append(res.Notes,
		kb.versions(ctx),
		fmt.Sprintf("%d cold creates after %d unmeasured warm-ups, each a fresh sandbox id, through the backend's Go API (kubernetes.New with "+
			"a kubeconfig, as the gateway makes it): restricted Pod Security Standard enforced on the namespace, uid/gid 1000, read-only root, "+
			"Sandgate's server (%s) in the small sandbox image, image pull policy Never, url mode pod-ip, user data and skills on PVCs "+
			"(hostPath PersistentVolumes), a Role of deployments/kubernetes/rbac.yaml. Create returns once the Pod's container runs "+
			"and its server answered GET /v1/sandbox with the Pod's own secret; each sandbox is destroyed, and its Pod gone, before the next. "+
			"Percentiles are nearest-rank: with %d samples p99 is the maximum.", opts.KubeRuns, kubeWarmups, sandboxspec.ServerImagePath, opts.KubeRuns),
		fmt.Sprintf("Freeze and thaw: %d rounds on one sandbox whose background shell loop (`%s`, started through the sandbox's exec API) keeps "+
			"a CPU busy, 100 ms apart, each through the backend's Freezer (POST %s and %s to the Pod's server, which stops and continues every "+
			"process of its container but itself). Checked the same way: the sandbox used %.2f CPU-s/s running and %.2f frozen (its server's "+
			"Stats, over 1 s each).", opts.KubeRuns, kubeBurner, sandboxspec.FreezePath, sandboxspec.ThawPath, ft.running, ft.frozen),
		fmt.Sprintf("First request: %d new threads after %d unmeasured ones through one gateway replica (the run's build, "+
			"`--backend kubernetes` with the flags of test/e2e's kubeCluster: the ServiceAccount's kubeconfig, pod-ip, the user-data PVC, "+
			"restricted securityContext; a real redis-server); the row is the thread's first GET, from nothing to its 200. "+
			"Each thread is destroyed, and its Pod gone, before the next.", opts.KubeRuns, kubeWarmups),
		fmt.Sprintf("In pod-ip mode Create asks the sandbox's server itself as soon as its container runs, not waiting for the "+
			"kubelet's readiness probe (once a second), which had put creates at about 1.1 s or 2.0 s by the probe that caught the server. "+
			"Every sample, sorted, in ms: Create %s; gateway first request %s.", sortedMS(create), sortedMS(first)),
		fmt.Sprintf("Checkpoint: %d new threads through the same gateway, whose data_dir is the user-data volume's root "+
			"(kubernetes_shared_data_dir); each workspace gets 100 MB of /dev/urandom in one file, then its first checkpoint (a full "+
			"copy, no earlier one to link to) is timed from POST to 201. Samples, sorted, in ms: %s.", kubeCheckpointRuns, sortedMS(ckpt)),
		fmt.Sprintf("Prewarmed claim: a second gateway replica (`--prewarm %d`, its own Redis prefix, the same data_dir on the volume): before "+
			"each of %d new threads (after %d unmeasured) the bench waits until the pool is full again, then times the thread's first GET: the "+
			"claim's Lua script, the rename of the Pod's user-data dir to the thread's on the volume beneath its running subPath mounts, one "+
			"conditional PATCH of the Pod's labels and annotations (sandgate.claimed-as), the active record, and the proxied request; "+
			"each thread is destroyed once measured. "+
			"Samples, sorted, in ms: %s.", kubePrewarm, opts.KubeRuns, kubeWarmups, sortedMS(claims)),
	)
	if len(missing) > 0 {
		res.Notes = append(res.Notes, "No reference row for: "+strings.Join(missing, "; ")+" (not in this results directory).")
	}
	return res, nil
}

// setup makes the namespace, its Role and ServiceAccount, and the PVCs.
func (kb *kubeBench) setup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-kube-" + benchHex(4),
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	if _, err := kb.api.Admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	kb.ns = ns.Name
	if err := kb.api.DefaultServiceAccount(ctx, kb.ns); err != nil {
		return err
	}
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	token, err := kb.api.RBACToken(ctx, kb.ns, filepath.Join(root, "deployments", "kubernetes", "rbac.yaml"))
	if err != nil {
		return err
	}
	kb.kubeconfig = filepath.Join(kb.env.tmp, "kubeconfig")
	if err := kb.api.WriteKubeconfig(kb.kubeconfig, token, kb.ns); err != nil {
		return err
	}
	for _, claim := range []struct {
		name     string
		readOnly bool
	}{{kubeUserDataPVC, false}, {kubeSkillsPVC, true}} {
		if _, err := kb.api.BindHostPathPVC(ctx, kb.ns, claim.name, filepath.Join(kb.env.tmp, "pvc", claim.name), claim.readOnly); err != nil {
			return err
		}
	}
	return nil
}

// config is the backend's real-node test configuration.
func (kb *kubeBench) config() kubernetes.Config {
	return kubernetes.Config{
		Kubeconfig: kb.kubeconfig, Image: kb.node.SandboxImage, ImagePullPolicy: "Never", URLMode: kubernetes.URLPodIP,
		Server: sandboxspec.ServerImagePath, RunAsNonRoot: true, RunAsUser: 1000, RunAsGroup: 1000, FSGroup: 1000,
		ReadOnlyRootFS: true, UserDataPVC: kubeUserDataPVC, SkillsPVC: kubeSkillsPVC, Instance: "bench",
	}
}

// kubeSpec is a new sandbox of the bench user's thread, with a secret of
// its own as the pool mints one.
func kubeSpec(thread string) backend.Spec {
	s := backend.Spec{SandboxID: identity.SandboxID("bench", thread), User: "bench", Thread: thread, Secret: benchHex(32)}
	s.Labels = backend.IdentityLabels(s, "bench", nil)
	return s
}

// coldCreates times Create over fresh sandbox ids, then the Destroy of
// each and the wait until its Pod is gone.
func (kb *kubeBench) coldCreates(ctx context.Context, be backend.Backend) (create, deleted, gone []time.Duration, err error) {
	for i := range kubeWarmups + opts.KubeRuns {
		t0 := time.Now()
		info, err := be.Create(ctx, kubeSpec(fmt.Sprintf("cold-%d", i)))
		c := time.Since(t0)
		if err != nil {
			return nil, nil, nil, err
		}
		t0 = time.Now()
		if err := be.Destroy(ctx, info); err != nil {
			return nil, nil, nil, err
		}
		d := time.Since(t0)
		if err := kb.waitNoPods(ctx); err != nil {
			return nil, nil, nil, err
		}
		if i >= kubeWarmups {
			create, deleted, gone = append(create, c), append(deleted, d), append(gone, time.Since(t0))
		}
	}
	return create, deleted, gone, nil
}

// waitNoPods waits until the namespace has no Pod left: the next
// measurement starts on a quiet node.
func (kb *kubeBench) waitNoPods(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		pods, err := kb.api.Admin.CoreV1().Pods(kb.ns).List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pods still in namespace %s: %w", kb.ns, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

type kubeFreezeTimes struct {
	freeze, thaw []time.Duration
	// running and frozen are the sandbox's CPU-seconds per second.
	running, frozen float64
}

// freezeThaw times the Freezer on a sandbox running a CPU burner, and
// checks with the sandbox's Stats that a freeze stops it.
func (kb *kubeBench) freezeThaw(ctx context.Context, be backend.Backend) (kubeFreezeTimes, error) {
	var ft kubeFreezeTimes
	fz, ok := be.(backend.Freezer)
	st, sok := be.(backend.Statter)
	if !ok || !sok {
		return ft, errors.New("with kubernetes_server set the backend is no Freezer and Statter")
	}
	info, err := be.Create(ctx, kubeSpec("freeze"))
	if err != nil {
		return ft, err
	}
	defer func() {
		_ = be.Destroy(context.WithoutCancel(ctx), info)
		_ = kb.waitNoPods(context.WithoutCancel(ctx))
	}()
	if _, err := sandboxExec(ctx, info, kubeBurner); err != nil {
		return ft, err
	}
	if ft.running, err = cpuRate(ctx, st, info); err != nil {
		return ft, err
	}
	for range opts.KubeRuns {
		t0 := time.Now()
		if err := fz.Freeze(ctx, info); err != nil {
			return ft, err
		}
		ft.freeze = append(ft.freeze, time.Since(t0))
		time.Sleep(100 * time.Millisecond)
		t0 = time.Now()
		if err := fz.Thaw(ctx, info); err != nil {
			return ft, err
		}
		ft.thaw = append(ft.thaw, time.Since(t0))
		time.Sleep(100 * time.Millisecond)
	}
	if err := fz.Freeze(ctx, info); err != nil {
		return ft, err
	}
	ft.frozen, err = cpuRate(ctx, st, info)
	if terr := fz.Thaw(ctx, info); err == nil {
		err = terr
	}
	if err != nil {
		return ft, err
	}
	// Timings of a freeze that stops nothing would mean nothing.
	if ft.running < 0.2 || ft.frozen > ft.running/4 {
		return ft, fmt.Errorf("the burner used %.2f CPU-s/s running and %.2f frozen: it did not run, or the freeze did not stop it",
			ft.running, ft.frozen)
	}
	return ft, nil
}

// cpuRate is the sandbox's CPU-seconds per second over one second.
func cpuRate(ctx context.Context, st backend.Statter, info backend.Info) (float64, error) {
	a, err := st.Stats(ctx, info)
	if err != nil {
		return 0, err
	}
	time.Sleep(time.Second)
	b, err := st.Stats(ctx, info)
	if err != nil {
		return 0, err
	}
	return (b.CPUSeconds - a.CPUSeconds) / b.At.Sub(a.At).Seconds(), nil
}

// sandboxExec runs command through the sandbox's own exec API.
func sandboxExec(ctx context.Context, info backend.Info, command string) (string, error) {
	return execAt(ctx, info.URL, command, [2]string{sandboxspec.SecretHeader, info.Secret})
}

// gatewayFirst times new threads' first GET through a gateway replica
// running the kubernetes backend as test/e2e's kubeCluster runs it.
func (kb *kubeBench) gatewayFirst(ctx context.Context) (first, ckpt []time.Duration, err error) {
	// data_dir is the user-data volume's root (kubernetes_shared_data_dir):
	// the checkpoints below.
	gs, gaddr, err := startGatewayEnv(ctx, kb.env.bin, kb.env.redisAddr, filepath.Join(kb.env.tmp, "pvc", kubeUserDataPVC),
		filepath.Join(kb.env.tmp, "gateway.log"), nil, kb.gatewayFlags()...)
	if err != nil {
		return nil, nil, err
	}
	defer gs.stop(syscall.SIGTERM, 10*time.Second)
	base := "http://" + gaddr
	for i := range kubeWarmups + opts.KubeRuns {
		thread := fmt.Sprintf("first-%d", i)
		t0 := time.Now()
		_, err := call(ctx, "GET", base+"/threads/"+thread+"/v1/sandbox", "", nil)
		took := time.Since(t0)
		destroyThreads(context.WithoutCancel(ctx), base, []string{thread})
		if err != nil {
			log, _ := os.ReadFile(filepath.Join(kb.env.tmp, "gateway.log"))
			return nil, nil, fmt.Errorf("%w\n%s", err, tailLines(string(log), 20))
		}
		if err := kb.waitNoPods(ctx); err != nil {
			return nil, nil, err
		}
		if i >= kubeWarmups {
			first = append(first, took)
		}
	}
	ckpt, err = kubeCheckpoints(ctx, base)
	return first, ckpt, err
}

// kubePrewarm is the pre-started pool of the prewarmed first-request row.
const kubePrewarm = 2

// prewarmedFirst times new threads' first GET through a gateway replica
// with a pool of pre-started Pods, each claimed once the pool is full
// again; then every Pod goes.
func (kb *kubeBench) prewarmedFirst(ctx context.Context) ([]time.Duration, error) {
	const prefix = "bench:{kpw}:"
	gs, gaddr, err := startGatewayEnv(ctx, kb.env.bin, kb.env.redisAddr, filepath.Join(kb.env.tmp, "pvc", kubeUserDataPVC),
		filepath.Join(kb.env.tmp, "gateway-prewarm.log"), nil,
		append(kb.gatewayFlags(), "--prewarm", strconv.Itoa(kubePrewarm), "--redis-prefix", prefix)...)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: kb.env.redisAddr})
	defer rdb.Close()
	base := "http://" + gaddr
	var threads []string
	// Each thread's Pod goes once measured: 22 of them at 100m of CPU each
	// would not fit the 2-core node beside the pool.
	destroy := func(thread string) { destroyThreads(context.WithoutCancel(ctx), base, []string{thread}) }
	out, err := prewarmedFirsts(ctx, setupClient, base, rdb, statedb.NewKeys(prefix, 0), kubePrewarm, kubeWarmups+opts.KubeRuns, "prewarmed-", &threads, destroy)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	destroyThreads(dctx, base, threads)
	gs.stop(syscall.SIGTERM, 10*time.Second)
	// The pool's unclaimed Pods outlive the gateway by design.
	derr := kb.api.Admin.CoreV1().Pods(kb.ns).DeleteCollection(dctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: backend.LabelPrewarm})
	if err == nil {
		err = errors.Join(derr, kb.waitNoPods(dctx))
	}
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(kb.env.tmp, "gateway-prewarm.log"))
		return nil, fmt.Errorf("%w\n%s\n%s", err, tailLines(string(log), 60), kb.events(dctx))
	}
	return out[kubeWarmups:], nil
}

// events lists the namespace's events, for a failure's context.
func (kb *kubeBench) events(ctx context.Context) string {
	list, err := kb.api.Admin.CoreV1().Events(kb.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "events: " + err.Error()
	}
	var b strings.Builder
	for _, e := range list.Items {
		fmt.Fprintf(&b, "%s %s/%s %s: %s\n", e.LastTimestamp.Format(time.TimeOnly), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
	return b.String()
}

// gatewayFlags run a gateway replica's kubernetes backend as test/e2e's
// kubeCluster does, with data_dir the user-data volume's root
// (kubernetes_shared_data_dir): checkpoints and the prewarm pool.
func (kb *kubeBench) gatewayFlags() []string {
	return []string{
		"--kubernetes-shared-data-dir",
		"--backend", "kubernetes",
		"--kubernetes-kubeconfig", kb.kubeconfig,
		"--kubernetes-url-mode", "pod-ip",
		"--kubernetes-user-data-pvc", kubeUserDataPVC,
		"--image", kb.node.SandboxImage,
		"--kubernetes-image-pull-policy", "Never",
		"--kubernetes-server", sandboxspec.ServerImagePath,
		"--kubernetes-run-as-non-root", "--kubernetes-run-as-user", "1000", "--kubernetes-run-as-group", "1000",
		"--kubernetes-read-only-root",
	}
}

// kubeCheckpointRuns: each a new thread whose workspace gets 100 MB of
// random bytes, then its first checkpoint (a full copy).
const kubeCheckpointRuns = 5

// kubeCheckpoints times POST /threads/{t}/checkpoints of a 100 MB
// workspace through the gateway: the Pod frozen by its server, the copy on
// the volume, the Pod thawed.
func kubeCheckpoints(ctx context.Context, base string) ([]time.Duration, error) {
	var out []time.Duration
	for i := range kubeCheckpointRuns {
		thread := fmt.Sprintf("ckpt-%d", i)
		if out, err := execIn(ctx, base, thread, "head -c 104857600 /dev/urandom > /mnt/user-data/workspace/blob && echo filled"); err != nil || !strings.Contains(out, "filled") {
			return nil, fmt.Errorf("fill the workspace: %v %s", err, out)
		}
		t0 := time.Now()
		body, err := call(ctx, "POST", base+"/threads/"+thread+"/checkpoints", `{"label":"bench"}`, [][2]string{{"Content-Type", "application/json"}})
		out = append(out, time.Since(t0))
		destroyThreads(context.WithoutCancel(ctx), base, []string{thread})
		if err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		var ck api.Checkpoint
		if err := json.Unmarshal(body, &ck); err != nil || ck.Size < 100<<20 {
			return nil, fmt.Errorf("checkpoint of the 100 MB workspace holds %d bytes (%v): %s", ck.Size, err, body)
		}
	}
	return out, nil
}

// sortedMS lists samples, sorted, in whole milliseconds.
func sortedMS(samples []time.Duration) string {
	s := slices.Clone(samples)
	slices.Sort(s)
	out := make([]string, len(s))
	for i, d := range s {
		out[i] = fmt.Sprint(d.Round(time.Millisecond).Milliseconds())
	}
	return strings.Join(out, ", ")
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// versions says what the node ran: the API server's and the kubelet's
// version, etcd, containerd, runc, the kernel and the cgroup version.
func (kb *kubeBench) versions(ctx context.Context) string {
	apiVersion := "unknown"
	if v, err := kb.api.Admin.Discovery().ServerVersion(); err == nil {
		apiVersion = v.GitVersion
	}
	kubelet := "unknown"
	if n, err := kb.api.Admin.CoreV1().Nodes().Get(ctx, kb.node.Name, metav1.GetOptions{}); err == nil {
		ni := n.Status.NodeInfo
		kubelet = fmt.Sprintf("%s, runtime %s, %s", ni.KubeletVersion, ni.ContainerRuntimeVersion, ni.OSImage)
	}
	cgroup := "cgroup v1"
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		cgroup = "cgroup v2"
	}
	return fmt.Sprintf("One node on this machine (scripts/kube-node.sh): kube-apiserver %s, kubelet %s (kube-scheduler and "+
		"kube-controller-manager of the same build), %s; `%s`; `%s`; CNI bridge plugin; %s, %s. No kube-proxy: Pods are reached on the "+
		"node's bridge by Pod IP. The machine is shared: see the load average above.",
		apiVersion, kubelet, toolVersion(ctx, filepath.Join(kb.api.BinDir, "etcd"), "--version"),
		toolVersion(ctx, "containerd", "--version"), toolVersion(ctx, "runc", "--version"), kernel(), cgroup)
}

// kubeReferences are rows of other suites' last results in resultsDir
// that the kube rows stand beside, relabelled with their run; missing
// names those not found.
func kubeReferences() (rows [][]string, missing []string) {
	refs := []struct{ suite, prefix, label string }{
		{"process-cold-create", "Create, isolated", "process backend: Create, isolated → first 200"},
		{"docker-cold-create", "Create:", "docker backend: Create → first 200"},
		{"docker-cold-create", "Destroy:", "docker backend: Destroy (stop + remove)"},
		{"freeze", "process, 1 GiB touched: freeze", "process backend: Freeze (cgroup freezer / SIGSTOP, 1 GiB sandbox)"},
		{"freeze", "process, 1 GiB touched: thaw", "process backend: Thaw (1 GiB sandbox)"},
		{"freeze", "docker, 1 GiB touched: freeze", "docker backend: Freeze (engine pause, 1 GiB sandbox)"},
		{"freeze", "docker, 1 GiB touched: thaw", "docker backend: Thaw (engine unpause, 1 GiB sandbox)"},
		{"lifecycle", "new thread: first GET /threads/{t}/v1/sandbox (process cold create)", "process backend: new thread's first GET through a gateway"},
	}
	results, err := readResults(resultsDir)
	if err != nil {
		return nil, []string{err.Error()}
	}
	byName := map[string]Result{}
	for _, r := range results {
		byName[r.Name] = r
	}
	for _, ref := range refs {
		row := referenceRow(byName[ref.suite], ref.prefix)
		if row == nil {
			missing = append(missing, ref.suite+": "+ref.prefix)
			continue
		}
		row[0] = fmt.Sprintf("reference, `%s` (%s): %s", ref.suite, runLabel(byName[ref.suite]), ref.label)
		rows = append(rows, row)
	}
	return rows, missing
}

// referenceRow is a copy of r's first statsColumns row whose label starts
// with prefix, or nil.
func referenceRow(r Result, prefix string) []string {
	if len(r.Columns) != len(statsColumns) {
		return nil
	}
	for _, row := range r.Rows {
		if len(row) == len(statsColumns) && strings.HasPrefix(row[0], prefix) {
			return append([]string(nil), row...)
		}
	}
	return nil
}
