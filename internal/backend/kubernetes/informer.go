package kubernetes

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/sandgate/sandgate/internal/backend"
)

// pods is one shared informer on the backend's Pods: Create waits for the
// Ready condition through it and Alive reads its cache, so no sandbox is
// polled through the API server.
type pods struct {
	ns       string
	informer cache.SharedIndexInformer

	mu      sync.Mutex
	changed map[string]chan struct{} // by Pod name; closed on the next event for it
	ended   []func(sandboxID, incarnation string)
}

func newPods(c *apiClient) *pods {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector()
			var list corev1.PodList
			return &list, c.list(ctx, "pods", o, &list)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector()
			return c.watch(ctx, "pods", o)
		},
	}
	p := &pods{
		ns: c.ns,
		informer: cache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{
			ObjectDescription: "sandgate sandbox pods",
			Indexers:          cache.Indexers{bySandbox: indexBySandbox},
		}),
		changed: map[string]chan struct{}{},
	}
	notify := func(obj any, deleted bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			p.notify(pod.Name)
			if deleted || stateOf(pod) == podDeleting || stateOf(pod) == podFinished {
				p.end(pod)
			}
		}
	}
	// Registration cannot fail before the informer has stopped.
	_, _ = p.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { notify(obj, false) },
		UpdateFunc: func(_, obj any) { notify(obj, false) },
		DeleteFunc: func(obj any) { notify(obj, true) },
	})
	return p
}

func (p *pods) run(ctx context.Context) { p.informer.RunWithContext(ctx) }

// onEnded registers fn for every Pod incarnation seen deleting, finished
// or deleted (more than once for one Pod: each event says it again).
func (p *pods) onEnded(fn func(sandboxID, incarnation string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = append(p.ended, fn)
}

func (p *pods) end(pod *corev1.Pod) {
	p.mu.Lock()
	fns := p.ended
	p.mu.Unlock()
	for _, fn := range fns {
		fn(sandboxOf(pod), string(pod.UID))
	}
}

func (p *pods) notify(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch, ok := p.changed[name]; ok {
		close(ch)
		delete(p.changed, name)
	}
}

// next returns a channel closed on the next event for the Pod name. Take
// it before reading the cache, so no event falls between the two.
func (p *pods) next(name string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch, ok := p.changed[name]
	if !ok {
		ch = make(chan struct{})
		p.changed[name] = ch
	}
	return ch
}

// synced waits until the informer has its first full list, bounded by ctx.
func (p *pods) synced(ctx context.Context) error {
	if p.informer.HasSynced() {
		return nil
	}
	if !cache.WaitForCacheSync(ctx.Done(), p.informer.HasSynced) {
		return fmt.Errorf("%w: pod cache not synced with the API server: %w", backend.ErrUnavailable, context.Cause(ctx))
	}
	return nil
}

// get returns the cached Pod, or nil. The object is shared: read only.
func (p *pods) get(name string) *corev1.Pod {
	obj, ok, err := p.informer.GetStore().GetByKey(p.ns + "/" + name)
	if err != nil || !ok {
		return nil
	}
	pod, _ := obj.(*corev1.Pod)
	return pod
}

// bySandbox indexes the cached Pods by the sandbox id they answer to.
const bySandbox = "sandbox"

func indexBySandbox(obj any) ([]string, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		return []string{sandboxOf(pod)}, nil
	}
	return nil, nil
}

// of returns the cached Pod of sandbox sid's incarnation ("" = one not
// ended), or nil. The object is shared: read only.
func (p *pods) of(sid, incarnation string) *corev1.Pod {
	objs, err := p.informer.GetIndexer().ByIndex(bySandbox, sid)
	if err != nil {
		return nil
	}
	for _, obj := range objs {
		pod, ok := obj.(*corev1.Pod)
		if ok && (string(pod.UID) == incarnation || incarnation == "" && live(pod)) {
			return pod
		}
	}
	return nil
}

// waitFor waits until done accepts the cached Pod (nil when it is gone),
// re-checking on every event for it.
func (p *pods) waitFor(ctx context.Context, name string, done func(*corev1.Pod) (bool, error)) error {
	if err := p.synced(ctx); err != nil {
		return err
	}
	for {
		ch := p.next(name)
		if ok, err := done(p.get(name)); ok || err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}
