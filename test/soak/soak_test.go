package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

// The short soak: about 30 s of 40 clients on three replicas while every
// fault kind is injected at least once; no sandbox may be lost or
// duplicated. `make test` runs it (under CI=true a missing redis-server
// fails it); `go test -short` skips it.
func TestShortSoakLosesAndDuplicatesNothing(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("the soak takes about a minute; run without -short")
	}
	_, err := exec.LookPath("redis-server")
	testutil.Require(t, err == nil, "redis-server")
	cfg := defaultConfig(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var log strings.Builder
	o, err := run(ctx, cfg, &log)
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	if !o.passed() {
		t.Fatalf("soak failed: %s", o.verdict())
	}
	for _, kind := range o.cycle {
		n := 0
		for _, f := range o.faults {
			if f.kind == kind && f.err == nil {
				n++
			}
		}
		if n == 0 {
			t.Errorf("fault %q never injected", kind)
		}
	}
	if o.total.ok < 100 || o.sampler.samples < 50 {
		t.Errorf("too little measured: %d ok requests, %d /proc samples", o.total.ok, o.sampler.samples)
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args     []string
		clients  int
		duration time.Duration
		report   string
		redis    string
		wantErr  bool
	}{
		{nil, 200, 5 * time.Minute, "", redisSingle, false},
		{[]string{"-short"}, 40, 30 * time.Second, "", redisSingle, false},
		{[]string{"-short", "-clients", "7", "-duration", "10s"}, 7, 10 * time.Second, "", redisSingle, false},
		{[]string{"-report", "out.md"}, 200, 5 * time.Minute, "out.md", redisSingle, false},
		{[]string{"-redis", "cluster"}, 200, 5 * time.Minute, "", redisCluster, false},
		{[]string{"-redis", "sentinel"}, 0, 0, "", "", true},
		{[]string{"-duration", "2h"}, 0, 0, "", "", true},
		{[]string{"stray"}, 0, 0, "", "", true},
	} {
		c, err := parseFlags(tc.args, &strings.Builder{})
		if (err != nil) != tc.wantErr {
			t.Errorf("%v: err %v", tc.args, err)
			continue
		}
		if err == nil && (c.Clients != tc.clients || c.Duration != tc.duration || c.Report != tc.report || c.Redis != tc.redis) {
			t.Errorf("%v: %+v", tc.args, c)
		}
	}
}
