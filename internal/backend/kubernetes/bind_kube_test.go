package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
)

// TestClaimRacesOnTheRealNode: two replicas claim one pre-started Pod for
// two threads at once, while its object keeps changing under them (as the
// kubelet's status writes change it): exactly one claim wins, the Pod
// answers to the winner's id only, and the loser is told the Pod is taken.
// A claim that gave up on the first write that moved the Pod's
// resourceVersion would lose both.
func TestClaimRacesOnTheRealNode(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t)
	cfg := e.config()
	cfg.SharedDataDir = true
	k1, k2 := e.backend(t, cfg), e.backend(t, cfg)
	warmSpec := backend.Spec{SandboxID: "feedfacefeedface", Secret: "warm-secret-0123456789abcdef0123456789abcdef"}
	warmSpec.Labels = backend.IdentityLabels(warmSpec, "test", map[string]string{backend.LabelPrewarm: "race"})
	warm := backendtest.MustCreate(t, k1, warmSpec)

	ctx, stop := context.WithCancel(t.Context())
	var writes atomic.Int64 // churn writes that landed
	churning := make(chan struct{})
	go func() { // a write to the Pod every 10 ms, as a status update would
		defer close(churning)
		for n := 0; ctx.Err() == nil; n++ {
			patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"test/churn":"%d"}}}`, n)
			if _, err := e.api.Admin.CoreV1().Pods(e.ns).Patch(ctx, podName(warm.SandboxID), types.MergePatchType, patch, metav1.PatchOptions{}); err == nil {
				writes.Add(1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	// The churn is under way before the claims start, however slow the
	// API server is today (a fixed head start was not, on a loaded machine).
	backendtest.Eventually(t, "the Pod is written twice before the claims", func() bool { return writes.Load() >= 2 })

	specs := []backend.Spec{spec("ann", "race"), spec("bob", "race")}
	infos, errs := make([]backend.Info, 2), make([]error, 2)
	before := writes.Load()
	var wg sync.WaitGroup
	for i, k := range []*Kubernetes{k1, k2} {
		wg.Go(func() {
			s := specs[i]
			s.Secret = warm.Secret
			infos[i], errs[i] = k.Bind(backendtest.Ctx(t), warm, s)
		})
	}
	wg.Wait()
	during := writes.Load() - before
	stop()
	<-churning
	if during < 1 {
		t.Fatal("no write to the Pod landed during the claims: the race was not run")
	}
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won < 0:
			won = i
		case err == nil:
			t.Fatalf("both claims of one Pod succeeded: %+v and %+v", infos[0], infos[1])
		case !strings.Contains(err.Error(), "not that unclaimed pre-started sandbox"):
			t.Errorf("claim %d lost with %v, want the Pod reported taken", i, err)
		}
	}
	if won < 0 {
		t.Fatalf("no claim succeeded: %v", errs)
	}
	pod, _ := e.pod(t, podName(warm.SandboxID))
	if sandboxOf(pod) != specs[won].SandboxID || infos[won].SandboxID != specs[won].SandboxID || infos[won].Thread != "race" {
		t.Fatalf("the Pod answers to %s, the claim returned %+v; want %s", sandboxOf(pod), infos[won], specs[won].SandboxID)
	}
	// The egress credential, made for the Pod's own id, now speaks for the
	// winner's thread on every replica, and from the Pod's address only.
	podIP := netip.MustParseAddr(pod.Status.PodIP)
	for i, k := range []*Kubernetes{k1, k2} {
		id, err := k.EgressIdentity(t.Context(), warm.SandboxID, EgressPassword(warm.Secret), podIP)
		if err != nil || id.SandboxID != specs[won].SandboxID || id.User != specs[won].User || id.Thread != "race" {
			t.Errorf("replica %d: the claimed Pod's egress identity = %+v, %v; want the winner's", i+1, id, err)
		}
		if _, err := k.EgressIdentity(t.Context(), warm.SandboxID, EgressPassword(warm.Secret), netip.MustParseAddr("127.0.0.1")); !errors.Is(err, ErrEgressDenied) {
			t.Errorf("replica %d: the claimed Pod's credential from another address: %v, want denied", i+1, err)
		}
	}
	for i, k := range []*Kubernetes{k1, k2} {
		if _, ok, err := k.Discover(backendtest.Ctx(t), specs[1-won].SandboxID); ok || err != nil {
			t.Errorf("replica %d finds the loser's id %s: %v %v", i+1, specs[1-won].SandboxID, ok, err)
		}
		if got, ok, err := k.Discover(backendtest.Ctx(t), specs[won].SandboxID); !ok || err != nil || got.Incarnation != warm.Incarnation {
			t.Errorf("replica %d: Discover(winner) = %+v %v %v, want the claimed Pod", i+1, got, ok, err)
		}
	}
}
