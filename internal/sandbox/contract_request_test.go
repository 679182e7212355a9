package sandbox

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// aioRequest is one AIO 1.9.4 request schema (agent-infra/sandbox,
// website/docs/public/v1/openapi.json, components "*Request") as this
// server must treat it: every optional property, with a value other than
// its default, and which of them the server refuses. An option the server
// neither implements nor refuses would be accepted and ignored, handing the
// caller a wrong answer with no sign; so a schema field missing from
// options, or a refused one that is accepted, fails the test.
type aioRequest struct {
	endpoint string         // as in aioEndpoints
	base     map[string]any // the required fields
	options  map[string]any // every optional property -> a non-default value
	refused  []string       // options answered with a 422 naming them
}

func aioRequests(ws string) []aioRequest {
	file := ws + "/o.txt"
	return []aioRequest{
		{"POST /v1/shell/exec", map[string]any{"command": "true"}, map[string]any{
			"id": "o1", "exec_dir": ws, "async_mode": true, "timeout": 5, "no_change_timeout": 5, "hard_timeout": 5,
			"strict": false, "preserve_symlinks": true, "truncate": false,
		}, []string{"strict", "preserve_symlinks", "truncate"}},
		{"POST /v1/shell/wait", map[string]any{"id": "missing"}, map[string]any{"seconds": 1, "max_wait_seconds": 1}, nil},
		{"POST /v1/shell/sessions/create", map[string]any{}, map[string]any{
			"id": "o2", "exec_dir": ws, "no_change_timeout": 5, "preserve_symlinks": true,
		}, []string{"preserve_symlinks"}},
		{"POST /v1/bash/exec", map[string]any{"command": "true"}, map[string]any{
			"session_id": "missing", "exec_dir": ws, "env": map[string]any{"A": "b"}, "async_mode": true, "timeout": 5,
			"hard_timeout": 5, "max_output_length": 100,
		}, nil},
		{"POST /v1/bash/output", map[string]any{"session_id": "missing"}, map[string]any{
			"command_id": "c", "offset": 1, "stderr_offset": 1, "wait": true, "wait_timeout": 1,
		}, nil},
		{"POST /v1/bash/write", map[string]any{"session_id": "missing", "input": "x"}, map[string]any{"command_id": "c"}, nil},
		{"POST /v1/bash/kill", map[string]any{"session_id": "missing"}, map[string]any{"signal": "SIGKILL"}, nil},
		{"POST /v1/bash/sessions/create", map[string]any{}, map[string]any{
			"session_id": "o3", "exec_dir": ws, "snapshot_path": "/tmp/snap",
		}, []string{"snapshot_path"}},
		{"POST /v1/file/read", map[string]any{"file": file}, map[string]any{"start_line": 1, "end_line": 2, "sudo": true}, []string{"sudo"}},
		{"POST /v1/file/write", map[string]any{"file": file, "content": "x\n"}, map[string]any{
			"encoding": "utf-8", "append": true, "leading_newline": true, "trailing_newline": true, "sudo": true,
		}, []string{"leading_newline", "trailing_newline", "sudo"}},
		{"POST /v1/file/replace", map[string]any{"file": file, "old_str": "x", "new_str": "x"}, map[string]any{"sudo": true}, []string{"sudo"}},
		{"POST /v1/file/search", map[string]any{"file": file, "regex": "x"}, map[string]any{"sudo": true}, []string{"sudo"}},
		{"POST /v1/file/grep", map[string]any{"path": ws, "pattern": "x"}, map[string]any{
			"include": []string{"*.txt"}, "exclude": []string{"node_modules"}, "case_insensitive": true, "fixed_strings": true,
			"context_before": 1, "context_after": 1, "max_results": 10, "max_file_size": "1K", "recursive": false,
			"multiline": true, "offset": 1, "type": "py",
		}, []string{"multiline", "offset", "type"}},
		{"POST /v1/file/glob", map[string]any{"path": ws, "pattern": "*"}, map[string]any{
			"exclude": []string{"x"}, "include_hidden": true, "files_only": false, "max_results": 10, "sort_by": "name",
			"sort_desc": true, "include_metadata": false,
		}, []string{"include_metadata"}},
		{"POST /v1/file/list", map[string]any{"path": ws}, map[string]any{
			"recursive": true, "show_hidden": false, "max_depth": 2, "file_types": []string{".py"}, "include_size": false,
			"include_permissions": false, "sort_by": "size", "sort_desc": true,
		}, []string{"file_types", "include_size", "include_permissions", "sort_by", "sort_desc"}},
		{"POST /v1/file/str_replace_editor", map[string]any{"command": "view", "path": file}, map[string]any{
			"file_text": "x", "old_str": "x", "new_str": "y", "insert_line": 1, "view_range": []int{1, 1}, "replace_mode": "ALL",
			"page_range": []int{1, 2}, "sheet_name": "s", "row_range": []int{1, 2}, "slide_range": []int{1, 2}, "enable_metadata": true,
		}, []string{"page_range", "sheet_name", "row_range", "slide_range", "enable_metadata"}},
		{"POST /v1/code/execute", map[string]any{"language": "python", "code": "1"}, map[string]any{
			"timeout": 5, "cwd": ws, "stateful": true, "session_id": "s",
		}, []string{"stateful", "session_id"}},
	}
}

// TestAIORequestOptions sends every optional AIO request field on its own:
// a refused one must get a 422 naming it (and must pass when null, which
// the SDKs may send), any other must not be refused. Each answer is also
// checked against the response contract. The behaviour of the supported
// options is asserted by the endpoint tests (grep's in TestFileGrep and
// TestFileGrepContext).
func TestAIORequestOptions(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	ws := vWorkspace
	okData[map[string]any](t, ts, "/v1/file/write", map[string]any{"file": ws + "/o.txt", "content": "x\n"})
	for _, req := range aioRequests(ws) {
		if _, known := aioEndpoints[req.endpoint]; !known {
			t.Errorf("%s: not in aioEndpoints", req.endpoint)
		}
		for _, field := range sortedKeys(req.options) {
			refused := slices.Contains(req.refused, field)
			for _, value := range []any{req.options[field], nil} {
				t.Run(req.endpoint+" "+field+"="+string(mustJSON(t, value)), func(t *testing.T) {
					body := map[string]any{field: value}
					for k, v := range req.base {
						body[k] = v
					}
					r := ts.post(t, strings.TrimPrefix(req.endpoint, "POST "), body)
					if err := checkResponse(req.endpoint, r.Status, []byte(r.Body)); err != nil {
						t.Errorf("contract: %v", err)
					}
					switch named := namesField(r, field); {
					case refused && value != nil:
						wantStatus(t, r, http.StatusUnprocessableEntity, field)
						if !strings.Contains(r.Message, "not supported") {
							t.Fatalf("422 does not say the option is unsupported: %s", r.Message)
						}
					case named:
						t.Fatalf("%s refused: %s", field, r.Body)
					}
				})
			}
		}
		for _, field := range req.refused {
			if _, listed := req.options[field]; !listed {
				t.Errorf("%s: refused %s is not among its options", req.endpoint, field)
			}
		}
	}
}

// namesField reports whether r is a 422 whose detail points at field.
func namesField(r apiResp, field string) bool {
	var detail []fieldError
	_ = json.Unmarshal(r.Detail, &detail)
	return r.Status == http.StatusUnprocessableEntity && len(detail) > 0 && slices.Contains(detail[0].Loc, field)
}
