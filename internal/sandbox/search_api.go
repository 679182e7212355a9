package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Limits that keep a search over a huge tree bounded; a result cut short
// says truncated: true.
const (
	maxListed        = 10000 // entries returned by list/find/glob
	maxVisited       = 200000
	defaultGrepMax   = 1000
	defaultGrepFile  = 10 << 20 // files larger than this are skipped by grep
	maxGrepLine      = 2000     // line_content is cut to this many bytes
	binarySniffBytes = 8000
)

var errWalkLimit = errors.New("walk limit reached")

type listEntry struct {
	Name         string `json:"name"`
	Path         string `json:"path"`
	IsDirectory  bool   `json:"is_directory"`
	Size         int64  `json:"size"`
	ModifiedTime string `json:"modified_time"`
	Permissions  string `json:"permissions"`
}

type grepMatch struct {
	File          string   `json:"file"`
	LineNumber    int      `json:"line_number"`
	LineContent   string   `json:"line_content"`
	ContextBefore []string `json:"context_before,omitempty"`
	ContextAfter  []string `json:"context_after,omitempty"`
}

// searchRoot resolves the path field of a search request to an existing
// directory (or, for grep, possibly a file).
func (s *Server) searchRoot(p *string, allowFile bool) (host, virt string, fi os.FileInfo, err error) {
	if p == nil {
		return "", "", nil, missing("path")
	}
	if host, virt, err = s.hostPath("path", *p, false); err != nil {
		return "", "", nil, err
	}
	if fi, err = os.Stat(host); err != nil {
		return "", "", nil, s.fsError(err, virt)
	}
	switch {
	case fi.IsDir():
		// walk the real directory: WalkDir does not descend into a root
		// that is a symlink (Resolve already checked where it leads)
		if real, err := filepath.EvalSymlinks(host); err == nil {
			host = real
		}
	case !allowFile:
		return "", "", nil, invalid("path", "not a directory: %s", virt)
	case !fi.Mode().IsRegular():
		return "", "", nil, invalid("path", "not a regular file: %s", virt)
	}
	return host, virt, fi, nil
}

// walk visits the tree under root (not following symlinks) with paths
// relative to it, stopping at maxVisited entries or when ctx ends.
func walk(ctx context.Context, root string, fn func(rel string, d fs.DirEntry) error) error {
	visited := 0
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			return nil // unreadable entries are skipped, as find does
		}
		if p == root {
			return nil
		}
		if visited++; visited > maxVisited {
			return errWalkLimit
		}
		if visited%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		rel, _ := filepath.Rel(root, p)
		return fn(filepath.ToSlash(rel), d)
	})
}

// checkGlob validates a glob pattern (path.Match syntax per segment, "**"
// for any number of directories) and makes it relative to the search root.
func checkGlob(field, pattern, rootVirt string) (string, error) {
	if pattern == "" {
		return "", missing(field)
	}
	if path.IsAbs(pattern) {
		rest, ok := within(path.Clean(pattern), rootVirt)
		if !ok && rootVirt != "/" {
			return "", invalid(field, "%s: absolute pattern %q is not under path %s", field, pattern, rootVirt)
		}
		if !ok {
			rest = pattern
		}
		pattern = strings.TrimPrefix(rest, "/")
	}
	pattern = strings.TrimPrefix(pattern, "./")
	for _, seg := range strings.Split(pattern, "/") {
		if _, err := path.Match(seg, ""); err != nil {
			return "", invalid(field, "%s: malformed glob pattern %q", field, pattern)
		}
	}
	return pattern, nil
}

// matchGlob matches a slash-separated relative path against a pattern in
// which "**" stands for zero or more directories.
func matchGlob(pattern, rel string) bool {
	return matchSegs(strings.Split(pattern, "/"), strings.Split(rel, "/"))
}

func matchSegs(ps, ns []string) bool {
	for len(ps) > 0 {
		if ps[0] == "**" {
			for len(ps) > 0 && ps[0] == "**" {
				ps = ps[1:]
			}
			if len(ps) == 0 {
				return true
			}
			for i := range len(ns) {
				if matchSegs(ps, ns[i:]) {
					return true
				}
			}
			return false
		}
		if len(ns) == 0 {
			return false
		}
		if ok, _ := path.Match(ps[0], ns[0]); !ok {
			return false
		}
		ps, ns = ps[1:], ns[1:]
	}
	return len(ns) == 0
}

// matchFiles walks root collecting virtual paths of entries accepted by keep.
func matchFiles(ctx context.Context, host, virt string, keep func(rel string, d fs.DirEntry) bool) ([]string, bool, error) {
	files := []string{}
	err := walk(ctx, host, func(rel string, d fs.DirEntry) error {
		if keep(rel, d) {
			if len(files) == maxListed {
				return errWalkLimit
			}
			files = append(files, path.Join(virt, rel))
		}
		return nil
	})
	if errors.Is(err, errWalkLimit) {
		return files, true, nil
	}
	return files, false, err
}

// handleFileFind lists files (not directories) under path whose name
// matches glob, or whose relative path matches when glob contains "/".
func (s *Server) handleFileFind(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Path *string `json:"path"`
		Glob *string `json:"glob"`
	}
	if err := decode(w, r, &req); err != nil {
		return err
	}
	host, virt, _, err := s.searchRoot(req.Path, false)
	if err != nil {
		return err
	}
	if req.Glob == nil {
		return missing("glob")
	}
	pattern, err := checkGlob("glob", *req.Glob, virt)
	if err != nil {
		return err
	}
	byName := !strings.Contains(pattern, "/")
	files, truncated, err := matchFiles(r.Context(), host, virt, func(rel string, d fs.DirEntry) bool {
		if d.IsDir() {
			return false
		}
		if byName {
			return matchGlob(pattern, path.Base(rel))
		}
		return matchGlob(pattern, rel)
	})
	if err != nil {
		return s.fsError(err, virt)
	}
	ok(w, "files found", map[string]any{"path": virt, "files": files, "truncated": truncated})
	return nil
}

func (s *Server) handleFileList(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Path       *string `json:"path"`
		Recursive  bool    `json:"recursive"`
		ShowHidden bool    `json:"show_hidden"`
		MaxDepth   *int    `json:"max_depth"`
		// entries come in walk order (by name) with size and permissions
		FileTypes          unsupported `json:"file_types"`
		IncludeSize        unsupported `json:"include_size" accept:"true"`
		IncludePermissions unsupported `json:"include_permissions" accept:"true"`
		SortBy             unsupported `json:"sort_by" accept:"\"name\""`
		SortDesc           unsupported `json:"sort_desc" accept:"false"`
	}
	if err := decode(w, r, &req); err != nil {
		return err
	}
	host, virt, _, err := s.searchRoot(req.Path, false)
	if err != nil {
		return err
	}
	depth := 1
	if req.Recursive {
		depth = maxVisited
		if req.MaxDepth != nil {
			if depth = *req.MaxDepth; depth < 1 {
				return invalid("max_depth", "max_depth must be >= 1")
			}
		}
	}
	entries := []listEntry{}
	dirs, truncated := 0, false
	err = walk(r.Context(), host, func(rel string, d fs.DirEntry) error {
		level := strings.Count(rel, "/") + 1
		if !req.ShowHidden && strings.HasPrefix(d.Name(), ".") || level > depth {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if len(entries) == maxListed {
			return errWalkLimit
		}
		info, err := d.Info()
		if err != nil {
			return nil // vanished while listing
		}
		if d.IsDir() {
			dirs++
		}
		entries = append(entries, listEntry{Name: d.Name(), Path: path.Join(virt, rel), IsDirectory: d.IsDir(),
			Size: info.Size(), ModifiedTime: info.ModTime().UTC().Format(time.RFC3339),
			Permissions: "0" + strconv.FormatUint(uint64(info.Mode().Perm()), 8)})
		if d.IsDir() && level == depth {
			return fs.SkipDir
		}
		return nil
	})
	if errors.Is(err, errWalkLimit) {
		truncated, err = true, nil
	}
	if err != nil {
		return s.fsError(err, virt)
	}
	ok(w, "directory listed", map[string]any{"path": virt, "files": entries, "total_count": len(entries),
		"directory_count": dirs, "file_count": len(entries) - dirs, "truncated": truncated})
	return nil
}

type grepReq struct {
	Path            *string         `json:"path"`
	Pattern         *string         `json:"pattern"`
	CaseInsensitive bool            `json:"case_insensitive"`
	FixedStrings    bool            `json:"fixed_strings"`
	MaxResults      *int            `json:"max_results"`
	Recursive       *bool           `json:"recursive"`
	MaxFileSize     json.RawMessage `json:"max_file_size"` // bytes, or "512K" / "1M" / "1G"
	Include         []string        `json:"include"`
	Exclude         []string        `json:"exclude"`
	ContextBefore   *int            `json:"context_before"`
	ContextAfter    *int            `json:"context_after"`
	Multiline       unsupported     `json:"multiline" accept:"false" why:"RE2 matches line by line here"`
	// pagination would need a stable order across calls and files
	Offset unsupported `json:"offset" accept:"0"`
	Type   unsupported `json:"type" why:"ripgrep's type table is not built in; use include"`
}

// maxGrepContext is AIO's bound on context_before and context_after.
const maxGrepContext = 20

// pathFilter applies grep's include and exclude globs the way ripgrep's
// --glob does: a pattern without "/" matches an entry's name at any depth, one
// with "/" the path relative to the search root ("**" spans directories), and
// a trailing "/" restricts it to directories. An excluded directory is not
// entered; with include patterns only files matching one of them are
// searched (directories are still entered).
type pathFilter struct{ include, exclude []string }

func newPathFilter(include, exclude []string, rootVirt string) (pathFilter, error) {
	var f pathFilter
	for _, set := range []struct {
		field string
		in    []string
		out   *[]string
	}{{"include", include, &f.include}, {"exclude", exclude, &f.exclude}} {
		for _, raw := range set.in {
			p, dirOnly := strings.CutSuffix(raw, "/")
			pattern, err := checkGlob(set.field, p, rootVirt)
			if err != nil {
				return f, err
			}
			if dirOnly {
				pattern += "/"
			}
			*set.out = append(*set.out, pattern)
		}
	}
	return f, nil
}

func globHit(patterns []string, rel string, isDir bool) bool {
	for _, p := range patterns {
		p, dirOnly := strings.CutSuffix(p, "/")
		switch {
		case dirOnly && !isDir:
		case !strings.Contains(p, "/") && matchGlob(p, path.Base(rel)), matchGlob(p, rel):
			return true
		}
	}
	return false
}

// keep reports whether grep searches the file, or enters the directory, rel.
func (f pathFilter) keep(rel string, isDir bool) bool {
	if globHit(f.exclude, rel, isDir) {
		return false
	}
	return isDir || len(f.include) == 0 || globHit(f.include, rel, false)
}

// contextLines checks a context_before/context_after value (0 when absent).
func contextLines(field string, n *int) (int, error) {
	if n == nil {
		return 0, nil
	}
	if *n < 0 || *n > maxGrepContext {
		return 0, invalid(field, "%s must be between 0 and %d", field, maxGrepContext)
	}
	return *n, nil
}

// handleFileGrep searches file contents with an RE2 regular expression (or
// a fixed string). Binary files and files over max_file_size (default
// 10 MiB) are skipped; recursive defaults to true.
func (s *Server) handleFileGrep(w http.ResponseWriter, r *http.Request) error {
	var req grepReq
	if err := decode(w, r, &req); err != nil {
		return err
	}
	host, virt, fi, err := s.searchRoot(req.Path, true)
	if err != nil {
		return err
	}
	if req.Pattern == nil || *req.Pattern == "" {
		return missing("pattern")
	}
	expr := *req.Pattern
	if req.FixedStrings {
		expr = regexp.QuoteMeta(expr)
	}
	if req.CaseInsensitive {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return invalid("pattern", "pattern: invalid regular expression: %v", err)
	}
	limit := defaultGrepMax
	if req.MaxResults != nil {
		if limit = *req.MaxResults; limit < 1 {
			return invalid("max_results", "max_results must be >= 1")
		}
		limit = min(limit, maxListed)
	}
	maxSize, err := parseSize(req.MaxFileSize)
	if err != nil {
		return invalid("max_file_size", "max_file_size: %v", err)
	}
	filter, err := newPathFilter(req.Include, req.Exclude, virt)
	if err != nil {
		return err
	}
	g := grepper{re: re, limit: limit, maxSize: maxSize, matches: []grepMatch{}}
	if g.before, err = contextLines("context_before", req.ContextBefore); err != nil {
		return err
	}
	if g.after, err = contextLines("context_after", req.ContextAfter); err != nil {
		return err
	}
	if !fi.IsDir() {
		// a single file is filtered by its name, as rg filters a path it is given
		if filter.keep(path.Base(virt), false) {
			g.file(r.Context(), host, virt)
		}
	} else {
		recursive := req.Recursive == nil || *req.Recursive
		err = walk(r.Context(), host, func(rel string, d fs.DirEntry) error {
			switch {
			case d.IsDir() && (!recursive || !filter.keep(rel, true)):
				return fs.SkipDir
			case !filter.keep(rel, false):
			case d.Type().IsRegular():
				if g.file(r.Context(), filepath.Join(host, filepath.FromSlash(rel)), path.Join(virt, rel)) {
					return errWalkLimit
				}
			}
			return nil
		})
		if errors.Is(err, errWalkLimit) {
			g.truncated, err = true, nil
		}
		if err != nil {
			return s.fsError(err, virt)
		}
	}
	ok(w, "search finished", grepResult{Path: virt, Pattern: *req.Pattern, Matches: g.matches,
		MatchCount: len(g.matches), FilesSearched: g.searched, FilesMatched: g.matched, Truncated: g.truncated})
	return nil
}

// grepResult is the AIO FileGrepResult (path and pattern are required by
// the SDKs' model).
type grepResult struct {
	Path          string      `json:"path"`
	Pattern       string      `json:"pattern"`
	Matches       []grepMatch `json:"matches"`
	MatchCount    int         `json:"match_count"`
	FilesSearched int         `json:"files_searched"`
	FilesMatched  int         `json:"files_matched"`
	Truncated     bool        `json:"truncated"`
}

type grepper struct {
	re                *regexp.Regexp
	limit             int
	maxSize           int64
	before, after     int // context lines around each match
	matches           []grepMatch
	searched, matched int
	truncated         bool
}

// file greps one file; it reports true once the result limit is reached.
func (g *grepper) file(ctx context.Context, host, virt string) bool {
	f, err := os.Open(host)
	if err != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() > g.maxSize {
		return false
	}
	br := bufio.NewReaderSize(f, 64<<10)
	if head, _ := br.Peek(binarySniffBytes); bytes.IndexByte(head, 0) >= 0 {
		return false
	}
	g.searched++
	counted := false
	// recent holds the last g.before lines; open are this file's matches
	// still collecting g.after lines. Every match gets its own neighbours,
	// even when they are matches too.
	var recent []string
	open := []int{}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return true
		}
		line := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		text := ""
		if g.before > 0 || len(open) > 0 {
			text = cutLine(line)
		}
		for len(open) > 0 && len(g.matches[open[0]].ContextAfter) == g.after {
			open = open[1:]
		}
		for _, i := range open {
			g.matches[i].ContextAfter = append(g.matches[i].ContextAfter, text)
		}
		if g.re.Match(line) {
			if len(g.matches) == g.limit {
				g.truncated = true
				return true
			}
			if !counted {
				g.matched, counted = g.matched+1, true
			}
			m := grepMatch{File: virt, LineNumber: n, LineContent: cutLine(line)}
			if len(recent) > 0 {
				m.ContextBefore = slices.Clone(recent)
			}
			g.matches = append(g.matches, m)
			if g.after > 0 {
				open = append(open, len(g.matches)-1)
			}
		}
		if g.before > 0 {
			recent = append(recent[max(0, len(recent)+1-g.before):], text)
		}
	}
	return false // a line over 1 MiB ends the scan of that file
}

func cutLine(b []byte) string {
	if len(b) <= maxGrepLine {
		return string(b)
	}
	b = b[:maxGrepLine]
	return string(b[:len(b)-incompleteSuffix(b)])
}

// parseSize reads a byte count given as a JSON number or a string with an
// optional K/M/G suffix (powers of 1024). Absent means the default.
func parseSize(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return defaultGrepFile, nil
	}
	var n int64
	if json.Unmarshal(raw, &n) == nil && n > 0 {
		return n, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, errors.New("want a number of bytes or a size like \"1M\"")
	}
	s = strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B")
	mult := int64(1)
	if i := strings.IndexAny(s, "KMG"); i >= 0 && i == len(s)-1 {
		mult = map[byte]int64{'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}[s[i]]
		s = s[:i]
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, errors.New("want a number of bytes or a size like \"1M\"")
	}
	return int64(v * float64(mult)), nil
}
