package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// POST /v1/file/search (a regex over one file's lines) and POST
// /v1/file/str_replace_editor, the text-editor tool format
// (view/create/str_replace/insert/undo_edit) as AIO serves it. Editor
// failures are 4xx answers naming the field, like file/replace's. Undo
// history lives in the server's private state dir, at most undoDepth
// versions per file, and goes with the server.

const undoDepth = 10

// editMu serializes editor calls: each is a read-modify-write of a file
// plus its undo history.
var editMu sync.Mutex

func (s *Server) handleFileSearch(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		File  *string     `json:"file"`
		Regex *string     `json:"regex"`
		Sudo  unsupported `json:"sudo" accept:"false"`
	}
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.File == nil {
		return missing("file")
	}
	if req.Regex == nil || *req.Regex == "" {
		return missing("regex")
	}
	re, err := regexp.Compile(*req.Regex)
	if err != nil {
		return invalid("regex", "regex: invalid regular expression: %v", err)
	}
	virt, data, err := s.editable("file", *req.File)
	if err != nil {
		return err
	}
	res := struct {
		File        string   `json:"file"`
		Matches     []string `json:"matches"`
		LineNumbers []int    `json:"line_numbers"`
	}{File: virt, Matches: []string{}, LineNumbers: []int{}}
	for i, line := range strings.Split(string(data), "\n") {
		if re.MatchString(line) {
			res.Matches = append(res.Matches, cutLine([]byte(line)))
			res.LineNumbers = append(res.LineNumbers, i+1)
		}
	}
	ok(w, "search finished", res)
	return nil
}

// editable resolves field's path to an existing regular file within the
// content limit and reads it.
func (s *Server) editable(field, p string) (virt string, data []byte, err error) {
	host, virt, err := s.hostPath(field, p, false)
	if err != nil {
		return "", nil, err
	}
	fi, err := s.regularFile(field, host, virt)
	if err != nil {
		return "", nil, err
	}
	if fi.Size() > maxFileContent {
		return "", nil, statusErr(http.StatusRequestEntityTooLarge, "%s is larger than %d bytes", virt, maxFileContent)
	}
	if data, err = os.ReadFile(host); err != nil {
		return "", nil, s.fsError(err, virt)
	}
	return virt, data, nil
}

type editorReq struct {
	Command     *string `json:"command"`
	Path        *string `json:"path"`
	FileText    *string `json:"file_text"`
	OldStr      *string `json:"old_str"`
	NewStr      *string `json:"new_str"`
	InsertLine  *int    `json:"insert_line"`
	ViewRange   []int   `json:"view_range"`
	ReplaceMode string  `json:"replace_mode"`
	// PDF, Excel and PowerPoint views need AIO's document readers
	PageRange      unsupported `json:"page_range"`
	SheetName      unsupported `json:"sheet_name"`
	RowRange       unsupported `json:"row_range"`
	SlideRange     unsupported `json:"slide_range"`
	EnableMetadata unsupported `json:"enable_metadata" accept:"false"`
}

type editorResult struct {
	Output     string  `json:"output"`
	Path       string  `json:"path"`
	PrevExist  bool    `json:"prev_exist"`
	OldContent *string `json:"old_content"`
	NewContent *string `json:"new_content"`
}

func (s *Server) handleStrReplaceEditor(w http.ResponseWriter, r *http.Request) error {
	var req editorReq
	if err := decode(w, r, &req); err != nil {
		return err
	}
	cmd, err := required("command", req.Command)
	if err != nil {
		return err
	}
	if req.Path == nil {
		return missing("path")
	}
	editMu.Lock()
	defer editMu.Unlock()
	var res editorResult
	switch cmd {
	case "view":
		res, err = s.editorView(r.Context(), *req.Path, req.ViewRange)
	case "create":
		res, err = s.editorCreate(*req.Path, req.FileText)
	case "str_replace", "insert", "undo_edit":
		res, err = s.editorChange(cmd, req)
	default:
		return invalid("command", "command must be one of view, create, str_replace, insert, undo_edit")
	}
	if err != nil {
		return err
	}
	ok(w, cmd+" done", res)
	return nil
}

// numbered renders lines cat -n style, first numbered from.
func numbered(lines []string, from int) string {
	var b strings.Builder
	for i, l := range lines {
		fmt.Fprintf(&b, "%6d\t%s\n", from+i, l)
	}
	return b.String()
}

func (s *Server) editorView(ctx context.Context, p string, viewRange []int) (editorResult, error) {
	host, virt, err := s.hostPath("path", p, false)
	if err != nil {
		return editorResult{}, err
	}
	fi, err := os.Stat(host)
	if err != nil {
		return editorResult{}, s.fsError(err, virt)
	}
	if fi.IsDir() {
		var entries []string
		err := walk(ctx, host, func(rel string, d fs.DirEntry) error {
			if strings.HasPrefix(d.Name(), ".") || strings.Count(rel, "/") > 1 {
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			entries = append(entries, path.Join(virt, rel))
			return nil
		})
		if err != nil {
			return editorResult{}, s.fsError(err, virt)
		}
		sort.Strings(entries)
		out := fmt.Sprintf("Here are the files and directories up to 2 levels deep in %s, excluding hidden items:\n%s\n%s\n",
			virt, virt, strings.Join(entries, "\n"))
		return editorResult{Output: out, Path: virt, PrevExist: true}, nil
	}
	virt, data, err := s.editable("path", p)
	if err != nil {
		return editorResult{}, err
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	from, to := 1, len(lines)
	if len(viewRange) > 0 {
		if len(viewRange) != 2 || viewRange[0] < 1 || viewRange[0] > len(lines) ||
			viewRange[1] != -1 && (viewRange[1] < viewRange[0] || viewRange[1] > len(lines)) {
			return editorResult{}, invalid("view_range", "view_range must be [start, end] within 1..%d (end -1 = last line)", len(lines))
		}
		from = viewRange[0]
		if viewRange[1] != -1 {
			to = viewRange[1]
		}
	}
	out := fmt.Sprintf("Here's the result of running `cat -n` on %s:\n%s", virt, numbered(lines[from-1:to], from))
	return editorResult{Output: out, Path: virt, PrevExist: true}, nil
}

func (s *Server) editorCreate(p string, text *string) (editorResult, error) {
	if text == nil {
		return editorResult{}, missing("file_text")
	}
	host, virt, err := s.hostPath("path", p, true)
	if err != nil {
		return editorResult{}, err
	}
	if _, err := os.Lstat(host); err == nil {
		return editorResult{}, statusErr(http.StatusConflict, "file already exists at %s; create does not overwrite (use str_replace)", virt)
	}
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		return editorResult{}, s.fsError(err, path.Dir(virt))
	}
	err = createAtomic(host, []byte(*text))
	if errors.Is(err, fs.ErrExist) {
		return editorResult{}, statusErr(http.StatusConflict, "file already exists at %s; create does not overwrite (use str_replace)", virt)
	}
	if err != nil {
		return editorResult{}, s.fsError(err, virt)
	}
	return editorResult{Output: "File created successfully at: " + virt, Path: virt, NewContent: text}, nil
}

// editorChange runs str_replace, insert and undo_edit on an existing file
// (an atomic read-modify-write, see editFile).
func (s *Server) editorChange(cmd string, req editorReq) (editorResult, error) {
	host, virt, err := s.hostPath("path", *req.Path, true)
	if err != nil {
		return editorResult{}, err
	}
	var dropUndo func()
	_, data, outB, err := s.editFile("path", *req.Path, func(data []byte) ([]byte, error) {
		var out string
		var err error
		switch cmd {
		case "str_replace":
			out, err = strReplace(string(data), req)
		case "insert":
			out, err = insertAt(string(data), req)
		default: // undo_edit
			prev, drop, err := s.peekUndo(host)
			if err != nil {
				return nil, &apiError{status: http.StatusInternalServerError, err: err}
			}
			if drop == nil {
				return nil, statusErr(http.StatusConflict, "no edit history for %s", virt)
			}
			dropUndo = drop
			return prev, nil
		}
		if err != nil {
			return nil, err
		}
		if err := s.pushUndo(host, data); err != nil {
			return nil, &apiError{status: http.StatusInternalServerError, err: err}
		}
		return []byte(out), nil
	})
	if err != nil {
		return editorResult{}, err
	}
	old, out := string(data), string(outB)
	res := editorResult{Output: "The file " + virt + " has been edited.", Path: virt, PrevExist: true,
		OldContent: &old, NewContent: &out}
	if dropUndo != nil {
		dropUndo()
		res.Output = "Last edit to " + virt + " undone successfully."
	}
	return res, nil
}

// strReplace replaces old_str, which must occur exactly once unless
// replace_mode is ALL, FIRST or LAST.
func strReplace(text string, req editorReq) (string, error) {
	if req.OldStr == nil || *req.OldStr == "" {
		return "", missing("old_str")
	}
	newStr := ""
	if req.NewStr != nil {
		newStr = *req.NewStr
	}
	n := strings.Count(text, *req.OldStr)
	switch {
	case n == 0:
		return "", invalid("old_str", "old_str did not appear verbatim in the file")
	case req.ReplaceMode == "ALL":
		return strings.ReplaceAll(text, *req.OldStr, newStr), nil
	case req.ReplaceMode == "FIRST":
		return strings.Replace(text, *req.OldStr, newStr, 1), nil
	case req.ReplaceMode == "LAST":
		i := strings.LastIndex(text, *req.OldStr)
		return text[:i] + newStr + text[i+len(*req.OldStr):], nil
	case req.ReplaceMode != "":
		return "", invalid("replace_mode", "replace_mode must be ALL, FIRST or LAST")
	case n > 1:
		return "", invalid("old_str", "old_str occurs %d times; make it unique or set replace_mode", n)
	}
	return strings.Replace(text, *req.OldStr, newStr, 1), nil
}

// insertAt inserts new_str after line insert_line (0 = at the top).
func insertAt(text string, req editorReq) (string, error) {
	if req.NewStr == nil {
		return "", missing("new_str")
	}
	if req.InsertLine == nil {
		return "", missing("insert_line")
	}
	lines := strings.SplitAfter(text, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	at := *req.InsertLine
	if at < 0 || at > len(lines) {
		return "", invalid("insert_line", "insert_line must be within 0..%d", len(lines))
	}
	ins := *req.NewStr
	if !strings.HasSuffix(ins, "\n") {
		ins += "\n"
	}
	if at > 0 && !strings.HasSuffix(lines[at-1], "\n") {
		lines[at-1] += "\n"
	}
	return strings.Join(lines[:at], "") + ins + strings.Join(lines[at:], ""), nil
}

// undoDir is the history dir of one file.
func (s *Server) undoDir(host string) string {
	sum := sha256.Sum256([]byte(host))
	return filepath.Join(s.ensureStateDir(), "undo", hex.EncodeToString(sum[:12]))
}

// pushUndo saves content as the newest version, dropping the oldest beyond
// undoDepth.
func (s *Server) pushUndo(host string, content []byte) error {
	dir := s.undoDir(host)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("undo history: %w", err)
	}
	versions := undoVersions(dir)
	next := 1
	if len(versions) > 0 {
		next = versions[len(versions)-1] + 1
	}
	if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(next)), content, 0o600); err != nil {
		return fmt.Errorf("undo history: %w", err)
	}
	for _, v := range versions[:max(0, len(versions)+1-undoDepth)] {
		_ = os.Remove(filepath.Join(dir, strconv.Itoa(v)))
	}
	return nil
}

// peekUndo reads the newest saved version; drop removes it once it is
// restored. A nil drop means there is no history.
func (s *Server) peekUndo(host string) (content []byte, drop func(), err error) {
	dir := s.undoDir(host)
	versions := undoVersions(dir)
	if len(versions) == 0 {
		return nil, nil, nil
	}
	f := filepath.Join(dir, strconv.Itoa(versions[len(versions)-1]))
	data, err := os.ReadFile(f)
	if err != nil {
		return nil, nil, fmt.Errorf("undo history: %w", err)
	}
	return data, func() { _ = os.Remove(f) }, nil
}

func undoVersions(dir string) []int {
	entries, _ := os.ReadDir(dir)
	var out []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}
