package testutil

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// FailImage is an image the stand-in kubelet cannot "pull": Pods using it
// go Failed at once.
const FailImage = "sandgate.invalid/fail:never"

// Kubelet stands in for the kubelet of one node that every Pod of a
// namespace runs on: for each sandbox Pod it starts a real sandbox server
// (`gateway sandbox`) on 127.0.0.1 at the nodePort of the Pod's Service,
// with the Pod's volumes mapped to host directories the way the process
// backend maps a thread's dirs, and writes the Pod's status (Running,
// Ready, podIP 127.0.0.1) once the readiness probe's path answers. A Pod
// whose server exits goes Failed (restartPolicy Never); a deleted Pod's
// server is killed.
type Kubelet struct {
	t       testing.TB
	client  kubernetes.Interface
	ns      string
	binary  string
	pvcRoot string
	tmp     string
	pods    cache.SharedIndexInformer
	svcs    cache.SharedIndexInformer
	queue   chan string
	stop    context.CancelFunc
	wg      sync.WaitGroup

	mu    sync.Mutex
	procs map[types.UID]*kubeletProc
}

type kubeletProc struct {
	name   string
	cmd    *exec.Cmd
	done   chan struct{}
	killed bool // by the kubelet (Pod deleted), not a crash
}

// StartKubelet runs a stand-in kubelet for namespace until the test ends.
// A PVC's contents live in pvcRoot/{claim name}.
func StartKubelet(t testing.TB, api *KubeAPI, namespace, pvcRoot string) *Kubelet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := informers.NewSharedInformerFactoryWithOptions(api.Admin, 0, informers.WithNamespace(namespace))
	k := &Kubelet{
		t: t, client: api.Admin, ns: namespace, binary: GatewayBinary(t), pvcRoot: pvcRoot, tmp: t.TempDir(),
		pods: f.Core().V1().Pods().Informer(), svcs: f.Core().V1().Services().Informer(),
		queue: make(chan string, 1024), stop: cancel, procs: map[types.UID]*kubeletProc{},
	}
	enqueue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if m, ok := obj.(metav1.Object); ok {
			k.queue <- m.GetName()
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue}
	_, _ = k.pods.AddEventHandler(handler)
	_, _ = k.svcs.AddEventHandler(handler)
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), k.pods.HasSynced, k.svcs.HasSynced) {
		t.Fatal("stand-in kubelet: informers did not sync")
	}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case name := <-k.queue:
				k.sync(ctx, name)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		k.wg.Wait()
		f.Shutdown()
		k.mu.Lock()
		procs := slices.Collect(maps.Values(k.procs))
		k.mu.Unlock()
		for _, p := range procs {
			k.kill(p)
		}
	})
	return k
}

func (k *Kubelet) sync(ctx context.Context, name string) {
	pod := k.pod(name)
	k.mu.Lock()
	for uid, p := range k.procs {
		if p.name == name && (pod == nil || pod.UID != uid || pod.DeletionTimestamp != nil ||
			pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded) {
			delete(k.procs, uid)
			defer k.kill(p)
		}
	}
	_, running := k.procs[podUID(pod)]
	k.mu.Unlock()
	if pod == nil || running || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodPending {
		return
	}
	if pod.Spec.Containers[0].Image == FailImage {
		k.setFailed(ctx, pod, "ErrImagePull", "stand-in kubelet: image "+FailImage+" cannot be pulled")
		return
	}
	svc := k.service(name)
	if svc == nil || !ownedBy(svc, pod.UID) || svc.Spec.Ports[0].NodePort == 0 {
		return // the Service comes right after the Pod: its event brings us back
	}
	if err := k.run(ctx, pod, int(svc.Spec.Ports[0].NodePort)); err != nil {
		k.t.Logf("stand-in kubelet: start %s: %v", name, err)
		k.setFailed(ctx, pod, "StartError", err.Error())
	}
}

func podUID(pod *corev1.Pod) types.UID {
	if pod == nil {
		return ""
	}
	return pod.UID
}

func ownedBy(svc *corev1.Service, uid types.UID) bool {
	for _, o := range svc.OwnerReferences {
		if o.UID == uid {
			return true
		}
	}
	return false
}

func (k *Kubelet) pod(name string) *corev1.Pod {
	obj, ok, _ := k.pods.GetStore().GetByKey(k.ns + "/" + name)
	if !ok {
		return nil
	}
	return obj.(*corev1.Pod)
}

func (k *Kubelet) service(name string) *corev1.Service {
	obj, ok, _ := k.svcs.GetStore().GetByKey(k.ns + "/" + name)
	if !ok {
		return nil
	}
	return obj.(*corev1.Service)
}

// run starts the Pod's sandbox server and marks the Pod Ready once the
// readiness probe's path answers.
func (k *Kubelet) run(ctx context.Context, pod *corev1.Pod, port int) error {
	c := pod.Spec.Containers[0]
	args, err := k.serverArgs(pod, port)
	if err != nil {
		return err
	}
	cmd := exec.Command(k.binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + k.tmp}
	for _, e := range c.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	logf, err := os.Create(filepath.Join(k.tmp, pod.Name+"-"+string(pod.UID)+".log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &kubeletProc{name: pod.Name, cmd: cmd, done: make(chan struct{})}
	k.mu.Lock()
	k.procs[pod.UID] = p
	k.mu.Unlock()
	go func() {
		err := cmd.Wait()
		close(p.done)
		k.mu.Lock()
		killed := p.killed
		delete(k.procs, pod.UID)
		k.mu.Unlock()
		if !killed && ctx.Err() == nil {
			k.setFailed(ctx, pod, "Error", fmt.Sprintf("sandbox server exited: %v", err))
		}
	}()
	probe := fmt.Sprintf("http://127.0.0.1:%d%s", port, c.ReadinessProbe.HTTPGet.Path)
	if err := waitHTTP(probe, nil, "", 15*time.Second); err != nil {
		return err
	}
	return k.setStatus(ctx, pod, func(st *corev1.PodStatus) {
		now := metav1.Now()
		st.Phase, st.PodIP, st.HostIP, st.StartTime = corev1.PodRunning, "127.0.0.1", "127.0.0.1", &now
		st.PodIPs = []corev1.PodIP{{IP: "127.0.0.1"}}
		st.Conditions = nil
		for _, typ := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
			st.Conditions = append(st.Conditions, corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, LastTransitionTime: now})
		}
		st.ContainerStatuses = []corev1.ContainerStatus{{
			Name: c.Name, Image: c.Image, Ready: true, Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}}
	})
}

// serverArgs maps each volume mount of the sandbox container to a host
// directory: hostPath volumes as they are, PVCs under pvcRoot/{claim},
// emptyDirs under a temp dir; subPaths are created as the kubelet does.
func (k *Kubelet) serverArgs(pod *corev1.Pod, port int) ([]string, error) {
	args := []string{sandboxspec.ServerCommand, "--" + sandboxspec.FlagListen, "127.0.0.1:" + strconv.Itoa(port),
		"--" + sandboxspec.FlagHome, sandboxspec.VirtualWorkspace}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok {
			return nil, fmt.Errorf("volume mount %s: no volume %q", m.MountPath, m.Name)
		}
		var root string
		readOnly := m.ReadOnly
		switch {
		case v.HostPath != nil:
			root = v.HostPath.Path
		case v.PersistentVolumeClaim != nil:
			root = filepath.Join(k.pvcRoot, v.PersistentVolumeClaim.ClaimName)
			readOnly = readOnly || v.PersistentVolumeClaim.ReadOnly
		case v.EmptyDir != nil:
			root = filepath.Join(k.tmp, string(pod.UID), v.Name)
		default:
			return nil, fmt.Errorf("volume %s: unsupported source", v.Name)
		}
		host := filepath.Join(root, m.SubPath)
		if err := os.MkdirAll(host, 0o755); err != nil {
			return nil, err
		}
		flag := "--" + sandboxspec.FlagMap
		if readOnly {
			flag = "--" + sandboxspec.FlagMapRO
		}
		args = append(args, flag, m.MountPath+"="+host)
	}
	return args, nil
}

func (k *Kubelet) setFailed(ctx context.Context, pod *corev1.Pod, reason, msg string) {
	err := k.setStatus(ctx, pod, func(st *corev1.PodStatus) {
		st.Phase, st.Reason, st.Message = corev1.PodFailed, reason, msg
		st.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodFailed"}}
		st.ContainerStatuses = []corev1.ContainerStatus{{
			Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: reason, Message: msg}},
		}}
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		k.t.Logf("stand-in kubelet: mark %s failed: %v", pod.Name, err)
	}
}

// setStatus updates the status of this incarnation of the Pod, if it is
// still there.
func (k *Kubelet) setStatus(ctx context.Context, pod *corev1.Pod, edit func(*corev1.PodStatus)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := k.client.CoreV1().Pods(k.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID {
			return apierrors.NewNotFound(corev1.Resource("pods"), pod.Name)
		}
		edit(&cur.Status)
		_, err = k.client.CoreV1().Pods(k.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func (k *Kubelet) kill(p *kubeletProc) {
	k.mu.Lock()
	p.killed = true
	k.mu.Unlock()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Crash kills the sandbox server of the Pod name as if it had died on its
// own: the Pod goes Failed.
func (k *Kubelet) Crash(name string) {
	k.t.Helper()
	k.mu.Lock()
	var proc *kubeletProc
	for _, p := range k.procs {
		if p.name == name {
			proc = p
		}
	}
	k.mu.Unlock()
	if proc == nil {
		k.t.Fatalf("stand-in kubelet: no sandbox server for pod %s", name)
	}
	_ = syscall.Kill(-proc.cmd.Process.Pid, syscall.SIGKILL)
	<-proc.done
}

// Running reports whether a sandbox server runs for the Pod name.
func (k *Kubelet) Running(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.procs {
		if p.name == name {
			return true
		}
	}
	return false
}

// Probe reports whether a URL answers GET /v1/sandbox with 200.
func Probe(url string) bool {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(url + "/v1/sandbox")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
