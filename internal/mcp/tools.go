package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// DeerFlow's limits (deerflow/sandbox/tools.py and its config defaults).
const (
	bashMaxChars     = 20000
	readFileMaxChars = 50000
	lsMaxChars       = 20000
	lsMaxDepth       = 2
	lsMaxLines       = 500 // AioSandbox.list_dir's `| head -500`
	writeMaxBytes    = 80 * 1024
	writeErrMaxChars = 2000
	globDefault      = 200
	globMax          = 1000
	grepDefault      = 100
	grepMax          = 500
	grepLineChars    = 200
	grepMaxFileSize  = "1M"
	// globWalkMax is how many entries one glob asks of the sandbox before
	// DeerFlow's ignore list and basename matching filter them (the
	// sandbox's own cap on a listing).
	globWalkMax = 10000
	// workspace is where bash commands start, as in DeerFlow.
	workspace = "/mnt/user-data/workspace"
)

// Inputs: the names, types and optionality of DeerFlow's tools.
type (
	bashIn struct {
		Command     string `json:"command" jsonschema:"The bash command to execute. Always use absolute paths for files and directories."`
		Description string `json:"description,omitempty" jsonschema:"Optional short explanation of this command shown in the UI."`
	}
	lsIn struct {
		Path        string `json:"path" jsonschema:"The **absolute** path to the directory to list."`
		Description string `json:"description,omitempty" jsonschema:"Optional short explanation of this listing shown in the UI."`
	}
	readFileIn struct {
		Path        string `json:"path" jsonschema:"The **absolute** path to the file to read."`
		Description string `json:"description,omitempty" jsonschema:"Optional short explanation of this read shown in the UI."`
		StartLine   *int   `json:"start_line,omitempty" jsonschema:"Optional starting line number (1-indexed, inclusive). Omit to start at the first line."`
		EndLine     *int   `json:"end_line,omitempty" jsonschema:"Optional ending line number (1-indexed, inclusive). Omit to read through the last line."`
	}
	writeFileIn struct {
		Path        string `json:"path" jsonschema:"The **absolute** path to the file to write to."`
		Content     string `json:"content" jsonschema:"The content to write to the file."`
		Description string `json:"description,omitempty" jsonschema:"Optional short explanation of this write shown in the UI."`
		Append      bool   `json:"append,omitempty" jsonschema:"Whether to append content to the end of the file instead of overwriting it. Defaults to false."`
	}
	strReplaceIn struct {
		Path        string `json:"path" jsonschema:"The **absolute** path to the file to replace the substring in."`
		OldStr      string `json:"old_str" jsonschema:"The substring to replace."`
		NewStr      string `json:"new_str" jsonschema:"The new substring."`
		Description string `json:"description,omitempty" jsonschema:"Optional short explanation of this replacement shown in the UI."`
		ReplaceAll  bool   `json:"replace_all,omitempty" jsonschema:"Whether to replace all occurrences of the substring. If false, only the first occurrence is replaced. Default is false."`
	}
	globIn struct {
		Pattern     string `json:"pattern" jsonschema:"The glob pattern to match relative to the root path, for example **/*.py."`
		Path        string `json:"path" jsonschema:"The **absolute** root directory to search under."`
		Description string `json:"description,omitempty" jsonschema:"Optional short explanation of this search shown in the UI."`
		IncludeDirs bool   `json:"include_dirs,omitempty" jsonschema:"Whether matching directories should also be returned. Default is false."`
		MaxResults  *int   `json:"max_results,omitempty" jsonschema:"Maximum number of paths to return. Default is 200 (at most 1000)."`
	}
	grepIn struct {
		Pattern       string  `json:"pattern" jsonschema:"The string or regex pattern to search for."`
		Path          string  `json:"path" jsonschema:"The **absolute** file or root directory to search."`
		Description   string  `json:"description,omitempty" jsonschema:"Optional short explanation of this search shown in the UI."`
		Glob          *string `json:"glob,omitempty" jsonschema:"Optional glob filter for candidate files, for example **/*.py."`
		Literal       bool    `json:"literal,omitempty" jsonschema:"Whether to treat pattern as a plain string. Default is false."`
		CaseSensitive bool    `json:"case_sensitive,omitempty" jsonschema:"Whether matching is case-sensitive. Default is false."`
		MaxResults    *int    `json:"max_results,omitempty" jsonschema:"Maximum number of matching lines to return. Default is 100 (at most 500)."`
	}
)

// tools are DeerFlow's agent tools over one thread's sandbox.
type tools struct{ sb *sandbox }

// addTools registers DeerFlow's seven tools, the checkpoint tools and the
// template tools on srv.
func addTools(srv *sdk.Server, sb *sandbox) {
	t := tools{sb}
	sdk.AddTool(srv, &sdk.Tool{Name: "bash", Description: "Execute a bash command in the thread's sandbox. " +
		"Commands start in " + workspace + ". To start a long-lived process such as a web server, run it in the background " +
		"with its output redirected, e.g. `your-command > " + workspace + "/server.log 2>&1 &`. " +
		"Output over 20000 characters keeps its head and tail."}, t.bash)
	sdk.AddTool(srv, &sdk.Tool{Name: "ls", Description: "List the contents of a directory up to 2 levels deep, one path per line.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.ls)
	sdk.AddTool(srv, &sdk.Tool{Name: "read_file", Description: "Read the contents of a text file. Use this to examine source code, " +
		"configuration files, logs, or any text-based file. Output over 50000 characters is cut; use start_line/end_line for a range.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.readFile)
	sdk.AddTool(srv, &sdk.Tool{Name: "write_file", Description: "Write text content to a file. By default this overwrites the target " +
		"file; set append=true to add content to the end without replacing existing content. A single non-append call must not " +
		"exceed 80 KB of UTF-8 content: write the first section, then append further sections or edit with str_replace."}, t.writeFile)
	sdk.AddTool(srv, &sdk.Tool{Name: "str_replace", Description: "Replace a substring in a file with another substring. " +
		"If replace_all is false (default), only the first occurrence is replaced."}, t.strReplace)
	sdk.AddTool(srv, &sdk.Tool{Name: "glob", Description: "Find files or directories that match a glob pattern under a root directory. " +
		"A pattern without `/` matches the file name at any depth.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.glob)
	sdk.AddTool(srv, &sdk.Tool{Name: "grep", Description: "Search for matching lines inside a text file or files under a root directory.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.grep)
	addCheckpointTools(srv, t)
	addTemplateTools(srv, t)
	addPreviewTools(srv, t)
}

// text is a successful result; fail an isError one. DeerFlow returns its
// errors as "Error: ..." strings; MCP marks them as tool errors too.
func text(s string) (*sdk.CallToolResult, any, error) {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}, nil, nil
}

func fail(format string, args ...any) (*sdk.CallToolResult, any, error) {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf(format, args...)}}}, nil, nil
}

// badPath is the tool error for a path DeerFlow's tools refuse, "" for a
// good one: they take absolute (virtual) paths only.
func badPath(p string) string {
	if p == "" {
		return "Error: path is required"
	}
	if !path.IsAbs(p) {
		return fmt.Sprintf("Error: path must be absolute (for example %s/...): %s", workspace, p)
	}
	return ""
}

// failed turns a sandbox call's error into DeerFlow's text for the tool:
// the status-specific messages it gives, the sandbox's own message otherwise.
func failed(err error, p string, notFound, denied, unexpected string) (*sdk.CallToolResult, any, error) {
	switch status := statusOf(err); {
	case status == http.StatusNotFound && notFound != "":
		return fail("Error: %s: %s", notFound, p)
	case status == http.StatusForbidden && denied != "":
		return fail("Error: %s: %s", denied, p)
	case status == http.StatusUnprocessableEntity && strings.Contains(err.Error(), "is a directory"):
		return fail("Error: Path is a directory, not a file: %s", p)
	case status == http.StatusUnprocessableEntity && strings.Contains(err.Error(), "not a directory"):
		return fail("Error: Path is not a directory: %s", p)
	}
	return fail("Error: %s: %s", unexpected, err)
}

type shellResult struct {
	Status   string `json:"status"`
	Output   string `json:"output"`
	ExitCode *int   `json:"exit_code"`
}

func (t tools) bash(ctx context.Context, _ *sdk.CallToolRequest, in bashIn) (*sdk.CallToolResult, any, error) {
	if strings.TrimSpace(in.Command) == "" {
		return fail("Error: command is required")
	}
	var res shellResult
	err := t.sb.call(ctx, bashTimeout, "shell/exec", map[string]any{
		"command": "cd " + workspace + "; " + in.Command, "no_change_timeout": bashNoChange.Seconds(),
	}, &res)
	if err != nil {
		return fail("Error: Unexpected error executing command: %s", err)
	}
	return text(truncateBash(renderShell(res), bashMaxChars))
}

// renderShell is AioSandbox._render_shell_output, plus a note when the
// command is still running (the sandbox keeps it).
func renderShell(res shellResult) string {
	out := res.Output
	if res.ExitCode != nil && *res.ExitCode != 0 {
		if out != "" {
			out = fmt.Sprintf("%s\nExit Code: %d", out, *res.ExitCode)
		} else {
			out = fmt.Sprintf("Command exited with code %d", *res.ExitCode)
		}
	}
	if res.ExitCode == nil && res.Status != "" && res.Status != "completed" {
		out += fmt.Sprintf("\n(still running in the sandbox: %s after %s)", res.Status, bashNoChange)
	}
	if out == "" {
		return "(no output)"
	}
	return out
}

type listResult struct {
	Files []struct {
		Path string `json:"path"`
	} `json:"files"`
}

func (t tools) ls(ctx context.Context, _ *sdk.CallToolRequest, in lsIn) (*sdk.CallToolResult, any, error) {
	if msg := badPath(in.Path); msg != "" {
		return fail("%s", msg)
	}
	var res listResult
	err := t.sb.call(ctx, fileTimeout, "file/list", map[string]any{
		"path": in.Path, "recursive": true, "max_depth": lsMaxDepth, "show_hidden": true,
	}, &res)
	if err != nil {
		return failed(err, in.Path, "Directory not found", "Permission denied", "Unexpected error listing directory")
	}
	if len(res.Files) == 0 {
		return text("(empty)")
	}
	// find(1)'s listing, as DeerFlow's AIO sandbox takes it: the root first.
	lines := []string{in.Path}
	for _, f := range res.Files {
		if len(lines) == lsMaxLines {
			break
		}
		lines = append(lines, f.Path)
	}
	return text(truncateHead(strings.Join(lines, "\n"), lsMaxChars, "Use a more specific path to see fewer results"))
}

type readResult struct {
	Content  string `json:"content"`
	Encoding string `json:"encoding"`
}

// read is the whole file, or lines [start, end] (1-based, inclusive).
func (t tools) read(ctx context.Context, p string, start, end *int) (string, error) {
	req := map[string]any{"file": p}
	if start != nil {
		req["start_line"] = *start - 1 // the sandbox counts from 0, end exclusive
	}
	if end != nil {
		req["end_line"] = *end
	}
	var res readResult
	if err := t.sb.call(ctx, fileTimeout, "file/read", req, &res); err != nil {
		return "", err
	}
	if res.Encoding == "base64" {
		return "", errBinary
	}
	return res.Content, nil
}

var errBinary = errors.New("binary file")

func (t tools) readFile(ctx context.Context, _ *sdk.CallToolRequest, in readFileIn) (*sdk.CallToolResult, any, error) {
	if msg := badPath(in.Path); msg != "" {
		return fail("%s", msg)
	}
	switch {
	case in.StartLine != nil && *in.StartLine < 1:
		return fail("(start_line must be >= 1)")
	case in.EndLine != nil && *in.EndLine < 1:
		return fail("(end_line must be >= 1)")
	case in.StartLine != nil && in.EndLine != nil && *in.StartLine > *in.EndLine:
		return fail("(start_line > end_line — no lines in range)")
	}
	content, err := t.read(ctx, in.Path, in.StartLine, in.EndLine)
	if errors.Is(err, errBinary) {
		return fail("Error: cannot read '%s' as text — it appears to be a binary file (e.g. .xlsx, .pdf, or an image). "+
			"read_file only supports UTF-8 text. Use bash with a suitable library instead.", in.Path)
	}
	if err != nil {
		return failed(err, in.Path, "File not found", "Permission denied reading file", "Unexpected error reading file")
	}
	if content == "" {
		if in.StartLine != nil && *in.StartLine > 1 {
			return text("(start_line exceeds file length)")
		}
		return text("(empty)")
	}
	return text(truncateHead(content, readFileMaxChars, "Use start_line/end_line to read a specific range"))
}

func (t tools) writeFile(ctx context.Context, _ *sdk.CallToolRequest, in writeFileIn) (*sdk.CallToolResult, any, error) {
	if msg := badPath(in.Path); msg != "" {
		return fail("%s", msg)
	}
	if !in.Append && len(in.Content) > writeMaxBytes {
		return fail("Error: write_file content (%d bytes) exceeds the %d-byte single-call limit. Split the content into smaller "+
			"pieces: either (a) write the first section now, then use `str_replace` for further edits, or (b) call write_file "+
			"again with append=true carrying the next section.", len(in.Content), writeMaxBytes)
	}
	err := t.sb.call(ctx, fileTimeout, "file/write", map[string]any{"file": in.Path, "content": in.Content, "append": in.Append}, nil)
	if err != nil {
		res, _, _ := failed(err, in.Path, "", "Permission denied writing to file", "Failed to write file '"+in.Path+"'")
		tc := res.Content[0].(*sdk.TextContent)
		tc.Text = truncateRunes(tc.Text, writeErrMaxChars)
		return res, nil, nil
	}
	return text("OK")
}

// strReplace checks the file as DeerFlow does (text, old_str present),
// then edits it in one atomic step in the sandbox (the editor API's
// str_replace: under the file's edit lock, temp file and rename), so an
// edit by another client in between is never silently lost, which
// DeerFlow's read-replace-write could do.
func (t tools) strReplace(ctx context.Context, _ *sdk.CallToolRequest, in strReplaceIn) (*sdk.CallToolResult, any, error) {
	if msg := badPath(in.Path); msg != "" {
		return fail("%s", msg)
	}
	content, err := t.read(ctx, in.Path, nil, nil)
	if errors.Is(err, errBinary) {
		return fail("Error: cannot edit '%s' as text — it appears to be a binary file", in.Path)
	}
	if err != nil {
		return failed(err, in.Path, "File not found", "Permission denied accessing file", "Unexpected error replacing string")
	}
	if in.OldStr == "" {
		return text("OK") // a no-op edit, as in DeerFlow
	}
	if !strings.Contains(content, in.OldStr) {
		return fail("Error: String to replace not found in file: %s", in.Path)
	}
	mode := "FIRST"
	if in.ReplaceAll {
		mode = "ALL"
	}
	err = t.sb.call(ctx, fileTimeout, "file/str_replace_editor", map[string]any{"command": "str_replace", "path": in.Path,
		"old_str": in.OldStr, "new_str": in.NewStr, "replace_mode": mode}, nil)
	if statusOf(err) == http.StatusUnprocessableEntity && strings.Contains(err.Error(), "old_str") {
		// Another client's edit removed it after the check above.
		return fail("Error: String to replace not found in file: %s", in.Path)
	}
	if err != nil {
		return failed(err, in.Path, "File not found", "Permission denied accessing file", "Unexpected error replacing string")
	}
	return text("OK")
}

// maxResults is DeerFlow's _resolve_max_results: the default when absent,
// at most upper; below 1 is bad input.
func maxResults(v *int, def, upper int) (int, string) {
	if v == nil {
		return def, ""
	}
	if *v < 1 {
		return 0, fmt.Sprintf("Error: max_results must be >= 1, got %d", *v)
	}
	return min(*v, upper), ""
}

type globResult struct {
	Files []struct {
		Path string `json:"path"`
	} `json:"files"`
	Truncated bool `json:"truncated"`
}

func (t tools) glob(ctx context.Context, _ *sdk.CallToolRequest, in globIn) (*sdk.CallToolResult, any, error) {
	if msg := badPath(in.Path); msg != "" {
		return fail("%s", msg)
	}
	limit, msg := maxResults(in.MaxResults, globDefault, globMax)
	if msg != "" {
		return fail("%s", msg)
	}
	if msg := badPattern("pattern", in.Pattern); msg != "" {
		return fail("%s", msg)
	}
	// The sandbox anchors every pattern at the root; DeerFlow matches a
	// pattern without "/" against the name at any depth.
	walk := in.Pattern
	if !strings.Contains(walk, "/") {
		walk = "**/" + walk
	}
	var res globResult
	err := t.sb.call(ctx, fileTimeout, "file/glob", map[string]any{
		"path": in.Path, "pattern": walk, "files_only": !in.IncludeDirs, "include_hidden": true, "max_results": globWalkMax,
	}, &res)
	if err != nil {
		return failed(err, in.Path, "Directory not found", "Permission denied", "Unexpected error searching paths")
	}
	var matches []string
	truncated := res.Truncated
	for _, f := range res.Files {
		rel, ok := relative(f.Path, in.Path)
		if !ok || shouldIgnorePath(rel) || !pathMatches(in.Pattern, rel) {
			continue
		}
		if len(matches) == limit {
			truncated = true
			break
		}
		matches = append(matches, f.Path)
	}
	return text(formatGlob(in.Path, matches, truncated))
}

type grepResult struct {
	Matches []struct {
		File        string `json:"file"`
		LineNumber  int    `json:"line_number"`
		LineContent string `json:"line_content"`
	} `json:"matches"`
	Truncated bool `json:"truncated"`
}

type grepMatch struct {
	path string
	line int
	text string
}

func (t tools) grep(ctx context.Context, _ *sdk.CallToolRequest, in grepIn) (*sdk.CallToolResult, any, error) {
	if msg := badPath(in.Path); msg != "" {
		return fail("%s", msg)
	}
	limit, msg := maxResults(in.MaxResults, grepDefault, grepMax)
	if msg != "" {
		return fail("%s", msg)
	}
	if in.Pattern == "" {
		return fail("Error: pattern is required")
	}
	if in.Glob != nil {
		if msg := badPattern("glob", *in.Glob); msg != "" {
			return fail("%s", msg)
		}
	}
	if !in.Literal {
		// Checked here so a bad regex is the tool's clear error, not the
		// sandbox's 422 (both are RE2).
		if _, err := regexp.Compile(in.Pattern); err != nil {
			return fail("Error: Invalid regex pattern: %s", err)
		}
	}
	// Like DeerFlow's AIO sandbox: ask for more than the limit, since the
	// ignore list and the glob filter drop some.
	var res grepResult
	err := t.sb.call(ctx, fileTimeout, "file/grep", map[string]any{
		"path": in.Path, "pattern": in.Pattern, "case_insensitive": !in.CaseSensitive, "fixed_strings": in.Literal,
		"max_results": max(limit*4, limit+50), "max_file_size": grepMaxFileSize, "recursive": true,
	}, &res)
	if err != nil {
		return failed(err, in.Path, "Directory not found", "Permission denied", "Unexpected error searching file contents")
	}
	root := strings.TrimRight(in.Path, "/")
	var matches []grepMatch
	truncated := res.Truncated
	for _, m := range res.Matches {
		rel := path.Base(m.File) // the root itself is the one file searched
		if m.File != root {
			var ok bool
			if rel, ok = relative(m.File, in.Path); !ok || shouldIgnorePath(rel) {
				continue
			}
		}
		if in.Glob != nil && !pathMatches(*in.Glob, rel) {
			continue
		}
		if len(matches) == limit {
			truncated = true
			break
		}
		matches = append(matches, grepMatch{m.File, m.LineNumber, truncateLine(m.LineContent, grepLineChars)})
	}
	return text(formatGrep(in.Path, matches, truncated))
}
