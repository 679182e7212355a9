package sandboxspec

// The sandbox API (the all-in-one sandbox's /v1 API as the sandbox server
// serves it, plus Sandgate's own /v1/sandgate/ routes), written once: the
// sandbox server's contract tests check its answers against these schemas
// (internal/sandbox contract_*_test.go), its route table is kept equal to
// Endpoints by a test, and OpenAPI (openapi.go) turns them into the
// document the server serves at OpenAPIPath and the gateway merges into
// its own under each of its data-plane prefixes.
//
// Schema grammar (compact, so the contract reads as one table): str, int,
// num, bool, obj, any; [T] is an array of T; {T} an object whose values
// are all T; A|B either; a trailing ? allows null; Response[T] the
// envelope every JSON answer is ({success, message, hint, data: T|null});
// any other word names a Schemas or Enums entry. In a Schemas entry, a
// field name ending in ! is required.

// OpenAPIPath is where the sandbox server serves the sandbox API's OpenAPI
// document (through the gateway: /threads/{thread}/v1/openapi.json and the
// other data-plane prefixes, answered by the sandbox itself).
const OpenAPIPath = "/v1/openapi.json"

// Endpoint is one route of the sandbox API.
type Endpoint struct {
	Method, Path string // Path in OpenAPI's template syntax ({param})
	Summary      string
	// Request is the JSON body's schema (a Schemas name), "" = none, or
	// RequestMultipart.
	Request string
	// Query are the query parameters, as a Schemas field list.
	Query string
	// Response is the 200 answer's JSON type, or one of the Response*
	// kinds below.
	Response string
	// Stream: Accept: text/event-stream makes the answer a stream of
	// events (internal/sandbox/sse.go) instead of one JSON envelope.
	Stream bool
}

// The non-JSON request and response kinds of Endpoint.
const (
	RequestMultipart  = "multipart" // multipart/form-data: path, file
	ResponseFile      = "file"      // the file's bytes
	ResponseWebSocket = "websocket" // 101 Switching Protocols
	ResponseDocument  = "document"  // this API's OpenAPI document
	responseEnvelope  = "Response[" // prefix of an enveloped JSON type
)

// Endpoints is every route the sandbox server registers besides the port
// bridge (PortPrefix, any method and path), in its order.
var Endpoints = []Endpoint{
	{Method: "GET", Path: OpenAPIPath, Summary: "This API's OpenAPI document.", Response: ResponseDocument},
	{Method: "GET", Path: "/v1/sandbox", Summary: "The sandbox's environment: OS, user, home, tools.", Response: "SandboxResponse"},
	{Method: "GET", Path: ActivityPath, Summary: "Whether anything runs in the sandbox (the gateway's idle probe).",
		Query: BusyIdleAfterParam + ":str", Response: "Response[Activity]"},
	{Method: "POST", Path: FreezePath, Summary: "Stop every process of the sandbox but the server (SIGSTOP).", Response: "Response[Freeze]"},
	{Method: "POST", Path: ThawPath, Summary: "Continue what a freeze stopped (SIGCONT).", Response: "Response[Freeze]"},
	{Method: "GET", Path: StatsPath, Summary: "The sandbox's CPU, memory and process count.", Response: "Response[Stats]"},
	{Method: "GET", Path: CommandsPath, Summary: "The commands that ended: what ran, for whom, how it ended (never its output).",
		Query: CommandsLimitParam + ":int", Response: "Response[CommandLog]"},
	{Method: "GET", Path: "/v1/sandbox/packages/python", Summary: "The Python packages installed (pip list).", Response: "Response[any]"},
	{Method: "GET", Path: "/v1/sandbox/packages/nodejs", Summary: "The global npm packages installed.", Response: "Response[any]"},
	{Method: "POST", Path: "/v1/code/execute", Summary: "Run a piece of Python or JavaScript code.", Request: "CodeExecuteRequest",
		Response: "Response[CodeExecuteResponse]"},
	{Method: "GET", Path: "/v1/code/info", Summary: "The languages code/execute runs.", Response: "Response[CodeInfoResponse]"},
	{Method: "POST", Path: "/v1/shell/exec", Summary: "Run a shell command in a session (the default one without id).",
		Request: "ShellExecRequest", Response: "Response[ShellCommandResult]", Stream: true},
	{Method: "POST", Path: "/v1/shell/view", Summary: "A session's latest command and its output so far.", Request: "ShellIDRequest",
		Response: "Response[ShellViewResult]", Stream: true},
	{Method: "POST", Path: "/v1/shell/kill", Summary: "Kill a session's running commands.", Request: "ShellIDRequest",
		Response: "Response[ShellKillResult]"},
	{Method: "POST", Path: "/v1/shell/sessions/create", Summary: "Create a shell session.", Request: "ShellSessionCreateRequest",
		Response: "Response[ShellCreateSessionResponse]"},
	{Method: "DELETE", Path: "/v1/shell/sessions/{session_id}", Summary: "End a shell session and its commands.", Response: "Response[any]"},
	{Method: "GET", Path: "/v1/shell/ws", Summary: "An interactive terminal over a WebSocket.", Query: "id:str exec_dir:str",
		Response: ResponseWebSocket},
	{Method: "POST", Path: "/v1/shell/write", Summary: "Write to the stdin of a session's running command.", Request: "ShellWriteRequest",
		Response: "Response[ShellWriteResult]"},
	{Method: "POST", Path: "/v1/shell/wait", Summary: "Wait for a session's command to end.", Request: "ShellWaitRequest",
		Response: "Response[ShellWaitResult]"},
	{Method: "GET", Path: "/v1/shell/sessions", Summary: "The shell sessions.", Response: "Response[ActiveShellSessionsResult]"},
	{Method: "DELETE", Path: "/v1/shell/sessions", Summary: "End every shell session.", Response: "Response[any]"},
	{Method: "GET", Path: "/v1/shell/sessions/stats", Summary: "How many shell sessions there are.", Response: "Response[ShellSessionStats]"},
	{Method: "POST", Path: "/v1/bash/exec", Summary: "Run a command, its stdout and stderr apart.", Request: "BashExecRequest",
		Response: "Response[BashExecResult]"},
	{Method: "POST", Path: "/v1/bash/output", Summary: "A bash command's output from an offset.", Request: "BashOutputRequest",
		Response: "Response[BashOutputResult]"},
	{Method: "POST", Path: "/v1/bash/write", Summary: "Write to a bash command's stdin.", Request: "BashWriteRequest", Response: "Response[any]"},
	{Method: "POST", Path: "/v1/bash/kill", Summary: "Signal a bash session's running command.", Request: "BashKillRequest", Response: "Response[any]"},
	{Method: "GET", Path: "/v1/bash/sessions", Summary: "The bash sessions.", Response: "Response[[BashSessionInfo]]"},
	{Method: "POST", Path: "/v1/bash/sessions/create", Summary: "Create a bash session.", Request: "BashSessionCreateRequest",
		Response: "Response[BashSessionInfo]"},
	{Method: "POST", Path: "/v1/bash/sessions/{session_id}/close", Summary: "Close a bash session.", Response: "Response[any]"},
	{Method: "POST", Path: "/v1/file/read", Summary: "Read a file (lines [start_line, end_line)).", Request: "FileReadRequest",
		Response: "Response[FileReadResult|FileOperationError]"},
	{Method: "POST", Path: "/v1/file/write", Summary: "Write (or append to) a file.", Request: "FileWriteRequest",
		Response: "Response[FileWriteResult|FileOperationError]"},
	{Method: "POST", Path: "/v1/file/replace", Summary: "Replace a string in a file.", Request: "FileReplaceRequest",
		Response: "Response[FileReplaceResult|FileOperationError]"},
	{Method: "POST", Path: "/v1/file/find", Summary: "Find files by glob under a path.", Request: "FileFindRequest",
		Response: "Response[FileFindResult|FileOperationError]"},
	{Method: "POST", Path: "/v1/file/glob", Summary: "Match files by glob, with sizes and times.", Request: "FileGlobRequest",
		Response: "Response[FileGlobResult|FileOperationError]"},
	{Method: "POST", Path: "/v1/file/list", Summary: "List a directory.", Request: "FileListRequest",
		Response: "Response[FileListResult|FileOperationError]"},
	{Method: "POST", Path: "/v1/file/grep", Summary: "Search files' contents by regular expression.", Request: "FileGrepRequest",
		Response: "Response[FileGrepResult|FileOperationError]"},
	{Method: "POST", Path: "/v1/file/search", Summary: "Search one file by regular expression.", Request: "FileSearchRequest",
		Response: "Response[FileSearchResult|FileOperationError]"},
	{Method: "POST", Path: "/v1/file/str_replace_editor", Summary: "View, create and edit files (the str_replace_editor tool).",
		Request: "StrReplaceEditorRequest", Response: "Response[StrReplaceEditorResult|FileOperationError]"},
	{Method: "POST", Path: "/v1/file/upload", Summary: "Upload a file (multipart: path, then file).", Request: RequestMultipart,
		Response: "Response[FileUploadResult|FileOperationError]"},
	{Method: "GET", Path: "/v1/file/download", Summary: "Download a file.", Query: "path!:str", Response: ResponseFile},
}

// Schemas are the AIO 1.9.4 schemas (agent-infra/sandbox,
// website/docs/public/v1/openapi.json) as this server answers and reads
// them, and Sandgate's own: for every component the fields the generated
// SDKs require and the type of each field Sandgate sends or reads.
var Schemas = map[string]string{
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

	// Sandgate's own: Activity, Freeze, Stats and CommandLog above.
	"Activity":   "commands!:int stalled!:int requests!:int",
	"Freeze":     "frozen!:bool processes!:int",
	"Stats":      "cpu_seconds!:num memory_bytes!:int pids!:int source!:str oom_kills:int",
	"CommandLog": "records!:[CommandRecord] dropped!:int",
	"CommandRecord": "seq!:int command_id!:str session_id!:str command!:str command_bytes!:int who!:str " +
		"status!:BashCommandStatus exit_code!:int started_at!:str duration_ms!:int output_bytes!:int",

	// The request bodies, with every field AIO defines; those this server
	// refuses (a 422 saying "not supported", internal/sandbox options.go)
	// are listed too, so a generated client can still send the default.
	"ShellExecRequest": "command!:str id:str? exec_dir:str? async_mode:bool? timeout:num? no_change_timeout:num? hard_timeout:num? " +
		"env:{str?}? strict:bool? preserve_symlinks:bool? truncate:bool?",
	"ShellIDRequest":            "id!:str",
	"ShellSessionCreateRequest": "id:str? exec_dir:str? no_change_timeout:num? preserve_symlinks:bool?",
	"ShellWriteRequest":         "id!:str input!:str press_enter:bool?",
	"ShellWaitRequest":          "id!:str seconds:num? max_wait_seconds:num?",
	"BashExecRequest": "command!:str session_id:str? exec_dir:str? env:{str?}? async_mode:bool? timeout:num? hard_timeout:num? " +
		"max_output_length:int?",
	"BashOutputRequest":        "session_id!:str command_id:str? offset:int? stderr_offset:int? wait:bool? wait_timeout:num?",
	"BashWriteRequest":         "session_id!:str input!:str command_id:str?",
	"BashKillRequest":          "session_id!:str signal:str?",
	"BashSessionCreateRequest": "session_id:str? exec_dir:str? snapshot_path:str?",
	"FileReadRequest":          "file!:str start_line:int? end_line:int? sudo:bool?",
	"FileWriteRequest": "file!:str content!:str encoding:str? append:bool? leading_newline:bool? trailing_newline:bool? " +
		"sudo:bool?",
	"FileReplaceRequest": "file!:str old_str!:str new_str!:str sudo:bool?",
	"FileFindRequest":    "path!:str glob!:str",
	"FileGlobRequest": "path!:str pattern!:str exclude:[str]? include_hidden:bool? files_only:bool? max_results:int? " +
		"sort_by:str? sort_desc:bool? include_metadata:bool?",
	"FileListRequest": "path!:str recursive:bool? show_hidden:bool? max_depth:int? file_types:[str]? include_size:bool? " +
		"include_permissions:bool? sort_by:str? sort_desc:bool?",
	"FileGrepRequest": "path!:str pattern!:str include:[str]? exclude:[str]? case_insensitive:bool? fixed_strings:bool? " +
		"context_before:int? context_after:int? max_results:int? max_file_size:int|str? recursive:bool? multiline:bool? " +
		"offset:int? type:str?",
	"FileSearchRequest": "file!:str regex!:str sudo:bool?",
	"StrReplaceEditorRequest": "command!:str path!:str file_text:str? old_str:str? new_str:str? insert_line:int? " +
		"view_range:[int]? replace_mode:str? page_range:[int]? sheet_name:str? row_range:[int]? slide_range:[int]? " +
		"enable_metadata:bool?",
	"CodeExecuteRequest": "language!:Language code!:str timeout:num? cwd:str? stateful:bool? session_id:str?",
}

// Enums are the string enums of Schemas.
var Enums = map[string][]string{
	"BashCommandStatus": {"running", "completed", "no_change_timeout", "hard_timeout", "terminated"},
	"CommandStatus":     {"pending", "running", "completed", "timed_out", "killed"},
	"SessionStatus":     {"ready", "closed"},
	"Language":          {"python", "javascript"},
}
