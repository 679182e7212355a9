package sandbox

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// The AIO 1.9.4 response contract (agent-infra/sandbox,
// website/docs/public/v1/openapi.json), written down per endpoint from the
// published schema: for every component the fields the generated SDKs
// require and the type of each field Sandgate sends.
//
// Type grammar: str, int, num, bool, obj, any; [T] is an array of T; A|B a
// union; a trailing ? allows null; any other word names a component below.
// {T} is an object whose values are all T. In a component, a field name
// ending in ! is required.

var aioComponents = map[string]string{
	// Every JSON answer is a Response[T]: success, message, data: T|null.
	"ValidationError":     "loc!:[str|int] msg!:str type!:str",
	"HTTPValidationError": "detail:[ValidationError]",
	"FileOperationError":  "path!:str operation!:str message!:str error_type!:str retryable:bool errno:int? errno_name:str? exception_type:str?",

	"SandboxResponse": "success:bool message:str? data:str? hint:str? home_dir!:str workspace:str? version!:str detail!:SandboxDetail",
	"SandboxDetail":   "system!:SystemEnv runtime!:RuntimeEnv utils!:[ToolCategory]",
	"SystemEnv":       "os!:str os_version!:str arch!:str user!:str home_dir!:str workspace:str? timezone!:str occupied_ports!:[str]",
	"RuntimeEnv":      "python!:[ToolSpec] nodejs!:[ToolSpec]",
	"ToolSpec":        "ver:str? bin:str? alias:[str]",
	"ToolCategory":    "category!:str tools!:[AvailableTool]",
	"AvailableTool":   "name!:str description:str?",

	"ShellCommandResult":         "session_id!:str command!:str status!:BashCommandStatus output:str? console:[ConsoleRecord]? exit_code:int?",
	"ShellViewResult":            "output!:str session_id!:str console:[ConsoleRecord]? status!:BashCommandStatus command:str? exit_code:int?",
	"ShellKillResult":            "status!:BashCommandStatus exit_code:int? returncode:int?",
	"ConsoleRecord":              "ps1!:str command!:str output:str",
	"ShellCreateSessionResponse": "session_id!:str working_dir!:str",
	"ShellWriteResult":           "status!:BashCommandStatus",
	"ShellWaitResult":            "status!:BashCommandStatus",
	"ActiveShellSessionsResult":  "sessions!:{ShellSessionInfo}",
	"ShellSessionInfo":           "working_dir!:str created_at!:str last_used_at!:str age_seconds!:int status!:str current_command:str?",
	"ShellSessionStats":          "total_sessions!:int active_sessions!:int idle_sessions!:int max_sessions!:int session_timeout!:int usage_ratio!:num",
	"BashSessionInfo":            "session_id!:str status!:SessionStatus working_dir!:str created_at!:str last_used_at!:str current_command:str? command_count:int",
	"BashOutputResult":           "session_id!:str stdout:str stderr:str offset:int stderr_offset:int command:BashCommandInfo?",
	"BashCommandInfo":            "command_id!:str command!:str status!:CommandStatus exit_code:int?",
	"BashExecResult":             "session_id!:str command_id!:str command!:str status!:CommandStatus stdout:str? stderr:str? exit_code:int? offset:int stderr_offset:int",

	"FileReadResult":         "content!:str file!:str",
	"FileWriteResult":        "file!:str bytes_written:int?",
	"FileReplaceResult":      "file!:str replaced_count:int",
	"FileFindResult":         "path!:str files:[str]",
	"FileGrepResult":         "path!:str pattern!:str matches:[GrepMatch] match_count:int files_searched:int? files_matched:int? truncated:bool",
	"GrepMatch":              "file!:str line_number!:int line_content!:str context_before:[str]? context_after:[str]?",
	"FileGlobResult":         "path!:str pattern!:str files:[GlobFileInfo] total_count:int truncated:bool",
	"GlobFileInfo":           "path!:str name!:str is_directory:bool size:int? modified_time:str?",
	"FileListResult":         "path!:str files:[FileInfo] total_count:int directory_count:int file_count:int",
	"FileInfo":               "name!:str path!:str is_directory!:bool size:int? modified_time:str? permissions:str? extension:str?",
	"FileUploadResult":       "file_path!:str file_size!:int success!:bool",
	"FileSearchResult":       "file!:str matches:[str] line_numbers:[int]",
	"CodeExecuteResponse":    "language!:Language status!:str outputs:[obj] code!:str stdout:str? stderr:str? exit_code:int? traceback:[str]? session_id:str?",
	"CodeInfoResponse":       "languages!:[CodeLanguageInfo]",
	"CodeLanguageInfo":       "language!:Language description!:str runtime_version:str? default_timeout:int max_timeout:int details:obj",
	"StrReplaceEditorResult": "output!:str error:str? path!:str prev_exist!:bool old_content:str? new_content:str? metadata:obj?",

	// Sandgate's own, not AIO's: sandboxspec.Activity, the gateway's probe,
	// and sandboxspec.Stats. (sandboxspec.Freeze is checked against a
	// server process of its own, admin_linux_test.go: a freeze here would
	// stop every test's commands.)
	"Activity": "commands!:int stalled!:int requests!:int",
	"Stats":    "cpu_seconds!:num memory_bytes!:int pids!:int source!:str",
}

// aioEnums are the string enums.
var aioEnums = map[string][]string{
	"BashCommandStatus": {"running", "completed", "no_change_timeout", "hard_timeout", "terminated"},
	"CommandStatus":     {"pending", "running", "completed", "timed_out", "killed"},
	"SessionStatus":     {"ready", "closed"},
	"Language":          {"python", "javascript"},
}

// aioEndpoints maps "METHOD path" to the schema of its 200 answer. Every
// other status is checked against the generic Response (and a 422 also
// against HTTPValidationError), as the SDKs decode them.
var aioEndpoints = map[string]string{
	"GET /v1/sandbox":                           "SandboxResponse",
	"GET /v1/sandbox/packages/python":           "Response[any]",
	"GET /v1/sandbox/packages/nodejs":           "Response[any]",
	"POST /v1/code/execute":                     "Response[CodeExecuteResponse]",
	"GET /v1/code/info":                         "Response[CodeInfoResponse]",
	"POST /v1/shell/exec":                       "Response[ShellCommandResult]",
	"POST /v1/shell/view":                       "Response[ShellViewResult]",
	"POST /v1/shell/kill":                       "Response[ShellKillResult]",
	"POST /v1/shell/sessions/create":            "Response[ShellCreateSessionResponse]",
	"DELETE /v1/shell/sessions/{id}":            "Response[any]",
	"POST /v1/bash/exec":                        "Response[BashExecResult]",
	"POST /v1/shell/write":                      "Response[ShellWriteResult]",
	"POST /v1/shell/wait":                       "Response[ShellWaitResult]",
	"GET /v1/shell/sessions":                    "Response[ActiveShellSessionsResult]",
	"DELETE /v1/shell/sessions":                 "Response[any]",
	"GET /v1/shell/sessions/stats":              "Response[ShellSessionStats]",
	"POST /v1/bash/output":                      "Response[BashOutputResult]",
	"POST /v1/bash/write":                       "Response[any]",
	"POST /v1/bash/kill":                        "Response[any]",
	"GET /v1/bash/sessions":                     "Response[[BashSessionInfo]]",
	"POST /v1/bash/sessions/create":             "Response[BashSessionInfo]",
	"POST /v1/bash/sessions/{session_id}/close": "Response[any]",
	"POST /v1/file/read":                        "Response[FileReadResult|FileOperationError]",
	"POST /v1/file/write":                       "Response[FileWriteResult|FileOperationError]",
	"POST /v1/file/replace":                     "Response[FileReplaceResult|FileOperationError]",
	"POST /v1/file/find":                        "Response[FileFindResult|FileOperationError]",
	"POST /v1/file/grep":                        "Response[FileGrepResult|FileOperationError]",
	"POST /v1/file/glob":                        "Response[FileGlobResult|FileOperationError]",
	"POST /v1/file/list":                        "Response[FileListResult|FileOperationError]",
	"POST /v1/file/upload":                      "Response[FileUploadResult|FileOperationError]",
	"POST /v1/file/search":                      "Response[FileSearchResult|FileOperationError]",
	"POST /v1/file/str_replace_editor":          "Response[StrReplaceEditorResult|FileOperationError]",

	"GET " + sandboxspec.ActivityPath: "Response[Activity]",
	"GET " + sandboxspec.StatsPath:    "Response[Stats]",
}

// schemaError names where a value breaks the contract.
type schemaError struct{ at, msg string }

func (e schemaError) Error() string { return e.at + ": " + e.msg }

// checkType validates v (decoded with UseNumber) against typ at path at.
func checkType(v any, typ, at string) error {
	typ = strings.TrimSpace(typ)
	if nullable := strings.HasSuffix(typ, "?"); nullable || typ == "any" {
		if v == nil {
			return nil
		}
		typ = strings.TrimSuffix(typ, "?")
	}
	if typ == "any" {
		return nil
	}
	if alts := splitTop(typ, '|'); len(alts) > 1 {
		var errs []string
		for _, a := range alts {
			err := checkType(v, a, at)
			if err == nil {
				return nil
			}
			errs = append(errs, err.Error())
		}
		return schemaError{at, "matches none of " + typ + " (" + strings.Join(errs, "; ") + ")"}
	}
	if inner, ok := strings.CutPrefix(typ, "Response["); ok {
		return checkObject(v, "success:bool message:str? hint:str? data:"+strings.TrimSuffix(inner, "]")+"?", at)
	}
	if strings.HasPrefix(typ, "{") { // an object whose every value is T
		obj, ok := v.(map[string]any)
		if !ok {
			return schemaError{at, "want an object, got " + jsonKind(v)}
		}
		for _, k := range sortedKeys(obj) {
			if err := checkType(obj[k], typ[1:len(typ)-1], join(at, k)); err != nil {
				return err
			}
		}
		return nil
	}
	if strings.HasPrefix(typ, "[") {
		arr, ok := v.([]any)
		if !ok {
			return schemaError{at, fmt.Sprintf("want an array, got %s", jsonKind(v))}
		}
		for i, e := range arr {
			if err := checkType(e, typ[1:len(typ)-1], fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
		return nil
	}
	want := map[string]string{"str": "string", "bool": "boolean", "obj": "object", "int": "integer", "num": "number"}[typ]
	if values, ok := aioEnums[typ]; ok {
		if str, isStr := v.(string); !isStr || !slices.Contains(values, str) {
			return schemaError{at, fmt.Sprintf("want one of %s %v, got %v", typ, values, v)}
		}
		return nil
	}
	if want == "" {
		fields, ok := aioComponents[typ]
		if !ok {
			return schemaError{at, "unknown schema " + typ}
		}
		return checkObject(v, fields, at)
	}
	got := jsonKind(v)
	if got == want || want == "number" && got == "integer" {
		return nil
	}
	return schemaError{at, fmt.Sprintf("want %s, got %s", want, got)}
}

// checkObject validates an object against a component's field list.
func checkObject(v any, fields, at string) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return schemaError{at, "want an object, got " + jsonKind(v)}
	}
	for _, f := range strings.Fields(fields) {
		name, typ, _ := strings.Cut(f, ":")
		name, required := strings.CutSuffix(name, "!")
		val, present := obj[name]
		if !present {
			if required {
				return schemaError{join(at, name), "required field missing"}
			}
			continue
		}
		if err := checkType(val, typ, join(at, name)); err != nil {
			return err
		}
	}
	return nil
}

func join(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
}

// splitTop splits s at sep outside brackets.
func splitTop(s string, sep byte) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[', '{':
			depth++
		case ']', '}':
			depth--
		case sep:
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func jsonKind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return "integer"
		}
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

// checkResponse validates one answer of endpoint with status against the
// contract.
func checkResponse(endpoint string, status int, body []byte) error {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%s %d: body is not JSON: %w", endpoint, status, err)
	}
	schema := "Response[any]"
	if status == 200 {
		schema = aioEndpoints[endpoint]
	}
	if err := checkType(v, schema, ""); err != nil {
		return fmt.Errorf("%s %d: %w", endpoint, status, err)
	}
	if status == 422 {
		if err := checkType(v, "HTTPValidationError", ""); err != nil {
			return fmt.Errorf("%s %d: %w", endpoint, status, err)
		}
		if d, _ := v.(map[string]any)["detail"].([]any); len(d) == 0 {
			return fmt.Errorf("%s 422: detail: want at least one ValidationError", endpoint)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
