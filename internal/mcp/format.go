package mcp

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Output shapes and limits of DeerFlow's tools (deerflow/sandbox/tools.py
// and search.py). Lengths count characters (runes), as Python does.

// exitMarker is the shell status at the end of a failing command's output;
// truncation never cuts it.
var exitMarker = regexp.MustCompile(`(?:\nExit Code: -?\d+|\n?Command exited with code -?\d+)\s*$`)

// bashMinChars keeps the longest exit marker preservable.
const bashMinChars = 32

// truncateBash keeps head and tail of bash output (50/50) around
// "\n... [middle truncated: N chars skipped] ...\n", the trailing exit
// marker always kept; the result is at most max(limit, 32) characters.
func truncateBash(out string, limit int) string {
	if limit == 0 {
		return out
	}
	limit = max(limit, bashMinChars)
	if utf8.RuneCountInString(out) <= limit {
		return out
	}
	preserved := ""
	if loc := exitMarker.FindStringIndex(out); loc != nil && utf8.RuneCountInString(out[loc[0]:]) < limit {
		preserved = out[loc[0]:]
		out = out[:loc[0]]
		limit -= utf8.RuneCountInString(preserved)
		if utf8.RuneCountInString(out) <= limit {
			return out + preserved
		}
	}
	r := []rune(out)
	total := len(r)
	kept := max(0, limit-len(fmt.Sprintf("\n... [middle truncated: %d chars skipped] ...\n", total)))
	if kept == 0 {
		return string(r[:limit]) + preserved
	}
	head := kept / 2
	tail := kept - head
	marker := fmt.Sprintf("\n... [middle truncated: %d chars skipped] ...\n", total-kept)
	return string(r[:head]) + marker + string(r[total-tail:]) + preserved
}

// truncateHead keeps the beginning of out, followed by "\n... [truncated:
// showing first K of N chars. {hint}] ..."; the result is at most limit
// characters.
func truncateHead(out string, limit int, hint string) string {
	if limit == 0 || utf8.RuneCountInString(out) <= limit {
		return out
	}
	r := []rune(out)
	total := len(r)
	kept := max(0, limit-len(fmt.Sprintf("\n... [truncated: showing first %d of %d chars. %s] ...", total, total, hint)))
	if kept == 0 {
		return string(r[:limit])
	}
	return fmt.Sprintf("%s\n... [truncated: showing first %d of %d chars. %s] ...", string(r[:kept]), kept, total, hint)
}

// truncateRunes cuts s to at most limit characters.
func truncateRunes(s string, limit int) string {
	if utf8.RuneCountInString(s) <= limit {
		return s
	}
	return string([]rune(s)[:limit])
}

// truncateLine is search.truncate_line: one grep line, at most limit
// characters ("..." marks a cut).
func truncateLine(line string, limit int) string {
	line = strings.TrimRight(line, "\r\n")
	if utf8.RuneCountInString(line) <= limit {
		return line
	}
	return string([]rune(line)[:limit-3]) + "..."
}

func formatGlob(root string, matches []string, truncated bool) string {
	return formatFound(len(matches), truncated, "No files matched under "+root, "paths under "+root,
		"Narrow the path or pattern to see fewer matches.", func(b *strings.Builder) {
			for i, m := range matches {
				b.WriteString("\n" + strconv.Itoa(i+1) + ". " + m)
			}
		})
}

func formatGrep(root string, matches []grepMatch, truncated bool) string {
	return formatFound(len(matches), truncated, "No matches found under "+root, "matches under "+root,
		"Narrow the path or add a glob filter.", func(b *strings.Builder) {
			for _, m := range matches {
				fmt.Fprintf(b, "\n%s:%d: %s", m.path, m.line, m.text)
			}
		})
}

// formatFound is DeerFlow's shape of a search result: a count line, the
// entries, and a hint when they were truncated.
func formatFound(n int, truncated bool, none, what, narrow string, entries func(*strings.Builder)) string {
	if n == 0 {
		return none
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Found %d %s", n, what)
	if truncated {
		fmt.Fprintf(&b, " (showing first %d)", n)
	}
	entries(&b)
	if truncated {
		b.WriteString("\nResults truncated. " + narrow)
	}
	return b.String()
}

// badPattern is the tool error for a glob DeerFlow cannot match, "" for a
// good one.
func badPattern(field, p string) string {
	switch {
	case p == "":
		return "Error: " + field + " is required"
	case path.IsAbs(p):
		return fmt.Sprintf("Error: %s must be relative to path, for example **/*.py: %s", field, p)
	}
	for _, seg := range strings.Split(p, "/") {
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Sprintf("Error: malformed glob %s: %s", field, p)
		}
	}
	return ""
}

// pathMatches is search.path_matches: a pattern without "/" matches the
// last segment (the name at any depth); any other is anchored at the root,
// "**" spanning zero or more segments.
func pathMatches(pattern, rel string) bool {
	if !strings.Contains(pattern, "/") {
		ok, _ := path.Match(pattern, path.Base(rel))
		return ok
	}
	return matchSegments(segments(pattern), segments(rel))
}

func segments(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" && s != "." {
			out = append(out, s)
		}
	}
	return out
}

func matchSegments(ps, ns []string) bool {
	if len(ps) == 0 {
		return len(ns) == 0
	}
	if ps[0] == "**" {
		for i := 0; i <= len(ns); i++ {
			if matchSegments(ps[1:], ns[i:]) {
				return true
			}
		}
		return false
	}
	if len(ns) == 0 {
		return false
	}
	ok, _ := path.Match(ps[0], ns[0])
	return ok && matchSegments(ps[1:], ns[1:])
}

// relative is file's path under root, if it is under it.
func relative(file, root string) (string, bool) {
	root = strings.TrimRight(root, "/")
	rel, ok := strings.CutPrefix(file, root+"/")
	return rel, ok && rel != ""
}

// ignoredNames are search.IGNORE_PATTERNS: VCS, dependency, build and
// cache directories and editor/OS droppings that glob and grep skip below
// the search root.
var ignoredNames = []string{
	".git", ".svn", ".hg", ".bzr", "node_modules", "__pycache__", ".venv", "venv", ".env", "env", ".tox", ".nox",
	".eggs", "*.egg-info", "site-packages", "dist", "build", ".next", ".nuxt", ".output", ".turbo", "target", "out",
	".idea", ".vscode", "*.swp", "*.swo", "*~", ".project", ".classpath", ".settings", ".DS_Store", "Thumbs.db",
	"desktop.ini", "*.lnk", "*.log", "*.tmp", "*.temp", ".upload-*.part", "*.bak", "*.cache", ".cache", "logs",
	".coverage", "coverage", ".nyc_output", "htmlcov", ".pytest_cache", ".mypy_cache", ".ruff_cache",
}

// shouldIgnorePath: some segment of rel is an ignored name.
func shouldIgnorePath(rel string) bool {
	for _, seg := range strings.Split(rel, "/") {
		for _, pat := range ignoredNames {
			if ok, _ := path.Match(pat, seg); ok && seg != "" {
				return true
			}
		}
	}
	return false
}
