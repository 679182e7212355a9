package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/imagestore"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/testutil"
)

func init() { register("templates", templatesSuite) }

// Figures of the templates suite.
const (
	figTplClaimPct      = "templates.mixed.claim_pct"
	figTplFirstP50      = "templates.mixed.first_put.p50_ms"
	figTplFirstP99      = "templates.mixed.first_put.p99_ms"
	figTplImportMS      = "templates.import.python_ms"
	figTplStoreBytes    = "templates.import.store_bytes"
	figTplPerSandbox    = "templates.disk.per_sandbox_bytes"
	figTplStoreGrowth   = "templates.disk.store_growth_bytes"
	figTplColdImageP50  = "templates.cold.image.p50_ms"
	figTplColdHostP50   = "templates.cold.host.p50_ms"
	figTplColdImageP99  = "templates.cold.image.p99_ms"
	figTplColdHostP99   = "templates.cold.host.p99_ms"
	tplDiskSandboxes    = 5  // python sandboxes whose disk is measured
	tplColdWarmups      = 2  // cold creates per template not counted
	tplColdRunsFull     = 20 // cold creates per template
	tplColdRunsQuick    = 5
	tplMixedThreadsFull = 40
)

// tplSpec is one template of the suite's gateway config: what it runs,
// and its share of the mixed workload's new threads.
type tplSpec struct {
	name, source string // source: "python" (the archive), "small" (the small image), "" (the host's /usr)
	env          string
	memory       string
	weight       float64
}

// tplMix are the four templates: the Python image twice (two fingerprints,
// one stored rootfs), the small sandbox image and the host's /usr.
var tplMix = []tplSpec{
	{name: "python", source: "python", weight: 0.50},
	{name: "shell", env: "{TEMPLATE_MARK: shell}", memory: "256m", weight: 0.25},
	{name: "python-data", source: "python", env: "{TEMPLATE_MARK: data}", memory: "1g", weight: 0.15},
	{name: "small", source: "small", env: "{TEMPLATE_MARK: small}", memory: "128m", weight: 0.10},
}

// tplConfig is the gateway's YAML: the templates, each with prewarm (0: none).
func tplConfig(archive, smallImage string, prewarm int) string {
	var b strings.Builder
	b.WriteString("templates:\n")
	for _, t := range tplMix {
		fmt.Fprintf(&b, "  - name: %s\n", t.name)
		switch t.source {
		case "python":
			fmt.Fprintf(&b, "    rootfs: %s\n", archive)
		case "small":
			fmt.Fprintf(&b, "    image: %s\n", smallImage)
		}
		if t.env != "" {
			fmt.Fprintf(&b, "    env: %s\n", t.env)
		}
		if t.memory != "" {
			fmt.Fprintf(&b, "    memory: %s\n", t.memory)
		}
		if prewarm > 0 {
			fmt.Fprintf(&b, "    prewarm: %d\n", prewarm)
		}
	}
	b.WriteString("default_template: python\n")
	return b.String()
}

// templatesSuite measures templates on the process backend with real
// jailed sandboxes: importing the Python image, disk per sandbox, cold
// creates from an image against the host's /usr, and a mixed workload of
// new threads over four templates sharing one prewarm pool.
func templatesSuite(ctx context.Context) (Result, error) {
	env, err := startSuiteEnv(ctx, "templates")
	if err != nil {
		return Result{}, err
	}
	defer env.close()
	rdb := redis.NewClient(&redis.Options{Addr: env.redisAddr})
	defer rdb.Close()
	dataDir := filepath.Join(env.tmp, "data")
	// Every sandbox either gateway made, pre-started ones included, is
	// destroyed with the gateway's binary before Redis stops.
	env.cleanup.push(func(ctx context.Context) {
		if err := destroyAll(ctx, processStateConfig(env, dataDir)); err != nil {
			fmt.Fprintf(os.Stderr, "bench: templates: sandboxes left running: %v\n", err)
		}
	})

	archive, err := pythonArchive(ctx)
	if err != nil {
		return Result{}, err
	}
	small, err := testutil.BuildSandboxImage(ctx, process.SandboxBinary(env.bin))
	if err != nil {
		return Result{}, err
	}
	res := Result{Title: "Templates: image import, disk, cold creates and a mixed prewarmed workload", Columns: statsColumns,
		Figures: map[string]float64{}}

	// 2. The Python image into an empty store: the gateway's own, so the
	// gateways below find it stored.
	imp, err := importPython(ctx, filepath.Join(dataDir, "images"), archive)
	if err != nil {
		return Result{}, err
	}

	// 3 and 4 on a gateway without a prewarm pool.
	cfgCold := filepath.Join(env.tmp, "templates-cold.yaml")
	if err := os.WriteFile(cfgCold, []byte(tplConfig(archive, small, 0)), 0o600); err != nil {
		return Result{}, err
	}
	gs, gaddr, err := startGatewayEnv(ctx, env.bin, env.redisAddr, dataDir, filepath.Join(env.tmp, "gateway-cold.log"), nil,
		"--config", cfgCold, "--redis-prefix", "bench:{tplcold}:")
	if err != nil {
		return Result{}, err
	}
	base := "http://" + gaddr
	disk, derr := diskPerSandbox(ctx, base, dataDir)
	var coldImage, coldHost []time.Duration
	if derr == nil {
		coldImage, coldHost, derr = coldTemplateCreates(ctx, base)
	}
	gs.stop(syscall.SIGTERM, 5*time.Second)
	if derr != nil {
		return Result{}, derr
	}

	// 1. The mixed workload on a gateway whose pool the four templates share.
	mix, err := mixedWorkload(ctx, env, rdb, dataDir, tplConfig(archive, small, 1))
	if err != nil {
		return Result{}, err
	}

	all := summarize(mix.latencies(""))
	res.Rows = append(res.Rows, statsRow(fmt.Sprintf("mixed: new thread's PUT /threads/{t}/sandbox, all templates, %d rounds (%d of %d claimed a pre-started sandbox)",
		len(mix), mix.claimed(""), all.N), all))
	for _, t := range tplMix {
		res.Rows = append(res.Rows, statsRow(fmt.Sprintf("mixed: template %s (%.0f %% of arrivals; %d of %d claimed)",
			t.name, t.weight*100, mix.claimed(t.name), len(mix.latencies(t.name))), summarize(mix.latencies(t.name))))
	}
	ci, ch := summarize(coldImage), summarize(coldHost)
	res.Rows = append(res.Rows,
		statsRow("cold PUT, template python (the Python image's rootfs), no prewarm pool", ci),
		statsRow("cold PUT, template shell (the host's /usr), no prewarm pool", ch),
		statsRow("import the Python image's archive into an empty store (imagestore.Open + ImportArchive)", summarize([]time.Duration{imp.took})),
		statsRow("import it again into the same store (stored: the archive's config and layer ids read, nothing unpacked)",
			summarize([]time.Duration{imp.again})))
	res.Tables = append([]Table{disk.table(imp)}, mix.poolTables()...)
	res.Series = mix.series()
	claimPct := 100 * float64(mix.claimed("")) / float64(max(all.N, 1))
	for k, v := range map[string]float64{figTplClaimPct: claimPct, figTplFirstP50: msF(all.P50), figTplFirstP99: msF(all.P99),
		figTplImportMS: msF(imp.took), figTplStoreBytes: float64(imp.storeBytes), figTplPerSandbox: disk.perSandbox(),
		figTplStoreGrowth: float64(disk.imagesAfter - disk.imagesBefore), figTplColdImageP50: msF(ci.P50),
		figTplColdHostP50: msF(ch.P50), figTplColdImageP99: msF(ci.P99), figTplColdHostP99: msF(ch.P99)} {
		res.Figures[k] = v
	}
	res.Notes = append(res.Notes, mix.notes()...)
	res.Notes = append(res.Notes,
		fmt.Sprintf("Templates (one gateway config): python = the Python image (scripts/sandbox-image.sh: Debian bookworm with python3, pip, "+
			"node, git, build tools; archive %s), python-data = the same image with other env and memory 1g (another fingerprint, the same "+
			"stored rootfs), small = the small sandbox image (busybox and the server, imported from the local Docker engine), "+
			"shell = no image (the host's /usr), memory 256m. Process backend, default isolation (jailed), real redis-server %s.",
			humanBytes(imp.archiveBytes), toolVersion(ctx, "redis-server", "--version")),
		fmt.Sprintf("Cold PUTs: %d per template after %d unmeasured, the two templates taking turns, each thread destroyed before the next; "+
			"a gateway with no prewarm pool on the same data dir as the mixed run (the image already stored). p99 is nearest-rank.",
			len(coldImage), tplColdWarmups),
		"The imports are one run each (the archive is 0.7 GiB): read the `docker save` archive, unpack every layer into a temporary "+
			"directory checking each layer's diff ID, remove write bits, rename into place; the page cache holds the archive. "+
			"Disk: the image's rootfs is shared, idmapped and read-only, under each jail's writable layer (a root gateway), so a "+
			"sandbox of it adds only its thread's dirs, its layer's empty upper and work dirs until it writes, and its state file; "+
			"the store does not grow with sandboxes.")
	return res, nil
}

// processStateConfig is the process backend of the suite's gateways (their
// binary, their state dir under dataDir), to destroy what they left.
func processStateConfig(env *suiteEnv, dataDir string) process.Config {
	return process.Config{Binary: env.bin, StateDir: filepath.Join(dataDir, "sandboxes", "process")}
}

// pythonArchive builds (or finds cached) the Python image with
// scripts/sandbox-image.sh and returns its `docker save` archive.
func pythonArchive(ctx context.Context) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "sandbox-image.sh"))
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/sandbox-image.sh: %w\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) < 2 {
		return "", fmt.Errorf("scripts/sandbox-image.sh printed %q, want the tag and the archive", stdout.String())
	}
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// importStats is the Python image's import into an empty store.
type importStats struct {
	took, again              time.Duration // into the empty store; again into the same one
	storeBytes, archiveBytes int64
}

func importPython(ctx context.Context, dir, archive string) (importStats, error) {
	fi, err := os.Stat(archive)
	if err != nil {
		return importStats{}, err
	}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	store, err := imagestore.Open(imagestore.Config{Dir: dir})
	if err != nil {
		return importStats{}, err
	}
	if _, err := store.ImportArchive(ictx, archive); err != nil {
		return importStats{}, err
	}
	took := time.Since(t0)
	// Again, as a restarted gateway does: the rootfs is stored, nothing is unpacked.
	t0 = time.Now()
	if _, err := store.ImportArchive(ictx, archive); err != nil {
		return importStats{}, err
	}
	again := time.Since(t0)
	size, err := duBytes(ctx, dir)
	return importStats{took: took, again: again, storeBytes: size, archiveBytes: fi.Size()}, err
}

// duBytes is the disk space a tree uses (du -s), in bytes.
func duBytes(ctx context.Context, path string) (int64, error) {
	out, err := exec.CommandContext(ctx, "du", "-s", "--block-size=1", path).Output()
	if err != nil {
		return 0, fmt.Errorf("du %s: %w", path, err)
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return 0, fmt.Errorf("du %s: no output", path)
	}
	return strconv.ParseInt(f[0], 10, 64)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
}

// putTemplate creates thread's sandbox of template; it returns the PUT's
// latency and outcome.
func putTemplate(ctx context.Context, base, thread, template string) (time.Duration, string, error) {
	t0 := time.Now()
	body, err := call(ctx, "PUT", base+"/threads/"+thread+"/sandbox", `{"template":"`+template+`"}`, nil)
	took := time.Since(t0)
	if err != nil {
		return 0, "", err
	}
	var sb struct{ Outcome, Template string }
	if err := json.Unmarshal(body, &sb); err != nil || sb.Template != template {
		return 0, "", fmt.Errorf("PUT %s template %s: %v %.300s", thread, template, err, body)
	}
	return took, sb.Outcome, nil
}

// diskStats is the data dir before and after tplDiskSandboxes sandboxes
// of template python.
type diskStats struct {
	before, after, imagesBefore, imagesAfter int64
	n                                        int
}

func (d diskStats) perSandbox() float64 {
	return float64((d.after-d.imagesAfter)-(d.before-d.imagesBefore)) / float64(max(d.n, 1))
}

func diskPerSandbox(ctx context.Context, base, dataDir string) (diskStats, error) {
	d := diskStats{n: tplDiskSandboxes}
	images := filepath.Join(dataDir, "images")
	var err error
	if d.before, err = duBytes(ctx, dataDir); err != nil {
		return d, err
	}
	if d.imagesBefore, err = duBytes(ctx, images); err != nil {
		return d, err
	}
	var threads []string
	defer func() { destroyThreads(context.WithoutCancel(ctx), base, threads) }()
	for i := range d.n {
		thread := "disk-" + strconv.Itoa(i)
		threads = append(threads, thread)
		if _, _, err := putTemplate(ctx, base, thread, "python"); err != nil {
			return d, err
		}
	}
	if d.after, err = duBytes(ctx, dataDir); err != nil {
		return d, err
	}
	d.imagesAfter, err = duBytes(ctx, images)
	return d, err
}

// table is the disk table, with the import's store size.
func (d diskStats) table(imp importStats) Table {
	return Table{Title: "Disk (du -s of the gateway's data dir):", Columns: []string{"measurement", "bytes", "size"},
		Rows: [][]string{
			{"Python image archive (`docker save`)", fmt.Sprint(imp.archiveBytes), humanBytes(imp.archiveBytes)},
			{"image store after importing it ({data_dir}/images)", fmt.Sprint(imp.storeBytes), humanBytes(imp.storeBytes)},
			{fmt.Sprintf("data dir besides the store, per extra sandbox of template python (%d created)", d.n),
				fmt.Sprintf("%.0f", d.perSandbox()), humanBytes(int64(d.perSandbox()))},
			{fmt.Sprintf("image store growth over those %d sandboxes", d.n), fmt.Sprint(d.imagesAfter - d.imagesBefore),
				humanBytes(d.imagesAfter - d.imagesBefore)},
		}}
}

// coldTemplateCreates times cold PUTs of template python and template
// shell, taking turns, each thread destroyed before the next create.
func coldTemplateCreates(ctx context.Context, base string) (image, host []time.Duration, err error) {
	runs := tplColdRunsFull
	if opts.Quick {
		runs = tplColdRunsQuick
	}
	for i := range tplColdWarmups + runs {
		for _, tpl := range []string{"python", "shell"} {
			thread := fmt.Sprintf("cold-%s-%d", tpl, i)
			d, outcome, err := putTemplate(ctx, base, thread, tpl)
			destroyThreads(ctx, base, []string{thread})
			if err != nil {
				return nil, nil, err
			}
			if outcome != "cold" {
				return nil, nil, fmt.Errorf("thread %s: outcome %q, want cold", thread, outcome)
			}
			if i < tplColdWarmups {
				continue
			}
			if tpl == "python" {
				image = append(image, d)
			} else {
				host = append(host, d)
			}
		}
	}
	return image, host, nil
}

// mixedGateway starts the gateway of the mixed workload with config yaml
// and prewarm total, and waits until its pool is full.
func mixedGateway(ctx context.Context, env *suiteEnv, dataDir, yaml, prefix string, store *statedb.Store, total int) (*service, string, error) {
	cfg := filepath.Join(env.tmp, "templates-prewarm.yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		return nil, "", err
	}
	gs, gaddr, err := startGatewayEnv(ctx, env.bin, env.redisAddr, dataDir, filepath.Join(env.tmp, "gateway-prewarm.log"), nil,
		"--config", cfg, "--prewarm", strconv.Itoa(total), "--redis-prefix", prefix)
	if err != nil {
		return nil, "", err
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		counts, err := store.PrewarmCounts(ctx)
		if err != nil {
			gs.stop(syscall.SIGTERM, 5*time.Second)
			return nil, "", err
		}
		n := int64(0)
		for _, c := range counts {
			n += c
		}
		if n >= int64(total) {
			return gs, gaddr, nil
		}
		if time.Now().After(deadline) {
			gs.stop(syscall.SIGTERM, 5*time.Second)
			return nil, "", fmt.Errorf("prewarm pool at %d of %d after 3 minutes", n, total)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
