package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sandgate/sandgate/internal/api"
)

// standinProvisioner speaks the part of DeerFlow's provisioner API that the
// remote backend calls, and answers every create with the URL of one real
// sandbox: the gateway keeps a record and a route per thread, as it would
// for thousands of sandboxes, without thousands of sandbox processes.
type standinProvisioner struct {
	url     string
	srv     *http.Server
	sandbox string // every sandbox_url
	creates atomic.Int64

	mu  sync.Mutex
	ids map[string]api.ProvisionerSandbox
}

const standinContract = 2

func startStandinProvisioner(sandboxURL string) (*standinProvisioner, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("stand-in provisioner: %w", err)
	}
	p := &standinProvisioner{url: "http://" + ln.Addr().String(), sandbox: sandboxURL, ids: map[string]api.ProvisionerSandbox{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSONBody(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /api/capabilities", func(w http.ResponseWriter, _ *http.Request) {
		writeJSONBody(w, http.StatusOK, map[string]int{"mount_contract_version": standinContract})
	})
	mux.HandleFunc("POST /api/sandboxes", p.create)
	mux.HandleFunc("GET /api/sandboxes", p.list)
	mux.HandleFunc("GET /api/sandboxes/{id}", p.get)
	mux.HandleFunc("DELETE /api/sandboxes/{id}", p.delete)
	p.srv = &http.Server{Handler: mux}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *standinProvisioner) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		SandboxID string `json:"sandbox_id"`
		ThreadID  string `json:"thread_id"`
		UserID    string `json:"user_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.SandboxID == "" {
		writeJSONBody(w, http.StatusBadRequest, map[string]string{"detail": "want sandbox_id, thread_id, user_id"})
		return
	}
	sb := api.ProvisionerSandbox{SandboxID: req.SandboxID, SandboxURL: p.sandbox, Status: "Running", UserID: req.UserID,
		ThreadID: req.ThreadID, MountContractVersion: standinContract}
	p.mu.Lock()
	if _, ok := p.ids[sb.SandboxID]; !ok {
		p.creates.Add(1)
	}
	p.ids[sb.SandboxID] = sb
	p.mu.Unlock()
	writeJSONBody(w, http.StatusOK, sb)
}

func (p *standinProvisioner) get(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	sb, ok := p.ids[r.PathValue("id")]
	p.mu.Unlock()
	if !ok {
		writeJSONBody(w, http.StatusNotFound, map[string]string{"detail": "not found"})
		return
	}
	writeJSONBody(w, http.StatusOK, sb)
}

func (p *standinProvisioner) delete(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	_, ok := p.ids[r.PathValue("id")]
	delete(p.ids, r.PathValue("id"))
	p.mu.Unlock()
	if !ok {
		writeJSONBody(w, http.StatusNotFound, map[string]string{"detail": "not found"})
		return
	}
	writeJSONBody(w, http.StatusOK, map[string]bool{"ok": true})
}

func (p *standinProvisioner) list(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	all := make([]api.ProvisionerSandbox, 0, len(p.ids))
	for _, sb := range p.ids {
		all = append(all, sb)
	}
	p.mu.Unlock()
	slices.SortFunc(all, func(a, b api.ProvisionerSandbox) int { return strings.Compare(a.SandboxID, b.SandboxID) })
	writeJSONBody(w, http.StatusOK, map[string]any{"sandboxes": all, "count": len(all)})
}

func (p *standinProvisioner) close() { _ = p.srv.Close() }

func writeJSONBody(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
