package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ARCHITECTURE.md's package graph is what go list says today.
func TestArchitectureGraphIsCurrent(t *testing.T) {
	root := filepath.Join("..", "..")
	graph, err := build(root)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(graph, "router → ") || !strings.Contains(graph, "cmd/gateway → ") {
		t.Fatalf("the graph lacks the router or the gateway command:\n%s", graph)
	}
	path := filepath.Join(root, "docs", "ARCHITECTURE.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := replace(string(doc), graph)
	if err != nil {
		t.Fatal(err)
	}
	if want != string(doc) {
		t.Errorf("docs/ARCHITECTURE.md's package graph is stale: run go run ./scripts/pkggraph -w docs/ARCHITECTURE.md")
	}
}

func TestReplaceNeedsMarkers(t *testing.T) {
	t.Parallel()
	if _, err := replace("no markers here", "x"); err == nil {
		t.Error("a document without the markers was accepted")
	}
	got, err := replace("a\n"+begin+"\nold\n"+end+"\nb", "new\n")
	if err != nil || got != "a\n"+begin+"\nnew\n"+end+"\nb" {
		t.Errorf("replace = %q, %v", got, err)
	}
}
