package sandboxspec

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// OpenAPI builds the sandbox API's OpenAPI 3.1 document from Endpoints,
// Schemas and Enums: a fresh one on each call, which the gateway rewrites
// into its own (a path per data-plane prefix). No schema uses a type array
// (null is an anyOf branch), which the common Go generators refuse.
func OpenAPI() map[string]any {
	sc := components{}
	paths := map[string]any{}
	for _, e := range Endpoints {
		item, _ := paths[e.Path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			if params := pathParams(e.Path); len(params) > 0 {
				item["parameters"] = params
			}
			paths[e.Path] = item
		}
		item[strings.ToLower(e.Method)] = sc.operation(e)
	}
	sc[EnvelopeSchema] = sc.object("success!:bool message:str? code:str data:any detail:[ValidationError]",
		"A failure: success false, a message for people, code when a client acts on it by machine, detail on a 422.")
	for name, fields := range Schemas {
		sc[name] = sc.object(fields, "")
	}
	for name, values := range Enums {
		sc[name] = map[string]any{"type": "string", "enum": values}
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":   "Sandgate sandbox API",
			"version": "1",
			"description": "The API of a sandbox (the all-in-one sandbox API, agent-infra/sandbox, as Sandgate's " +
				"sandbox server serves it, plus its own /v1/sandgate/ routes). Every JSON answer is an envelope: " +
				"{success, message, data}; a failure is success false with the HTTP status. Through the gateway " +
				"each path is under /threads/{thread}, /sandboxes/{id} or /c/{capability} (its /openapi.json).",
		},
		"paths": paths,
		"components": map[string]any{
			"schemas": map[string]any(sc),
			"securitySchemes": map[string]any{"sandboxKey": map[string]any{"type": "apiKey", "in": "header", "name": SecretHeader,
				"description": "the sandbox's secret; the gateway sets it, a client through the gateway never does"}},
		},
		"security": []any{map[string]any{"sandboxKey": []any{}}, map[string]any{}},
	}
}

// EnvelopeSchema names the schema of every failure the sandbox answers.
const EnvelopeSchema = "Envelope"

var openAPIJSON = sync.OnceValue(func() []byte {
	b, err := json.Marshal(OpenAPI())
	if err != nil {
		panic(fmt.Sprintf("sandbox OpenAPI document: %v", err)) // built from constants: a build defect
	}
	return b
})

// OpenAPIJSON is OpenAPI as JSON, made once.
func OpenAPIJSON() []byte { return openAPIJSON() }

// named matches a union of schema names only.
var named = regexp.MustCompile(`^[A-Z][A-Za-z]*(\|[A-Z][A-Za-z]*)+$`)

var pathParam = regexp.MustCompile(`\{([a-z_]+)\}`)

func pathParams(path string) []any {
	var out []any
	for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
		out = append(out, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
	}
	return out
}

// OperationID is e's operationId: its method and path in camel case
// (postFileRead, deleteShellSessionsSessionId).
func OperationID(e Endpoint) string {
	id := strings.ToLower(e.Method)
	for _, word := range strings.FieldsFunc(strings.TrimPrefix(e.Path, "/v1/"), func(r rune) bool {
		return r == '/' || r == '_' || r == '{' || r == '}' || r == '.'
	}) {
		id += strings.ToUpper(word[:1]) + word[1:]
	}
	return id
}

// components are a document's schemas as they are built: besides Schemas
// and Enums, a union of named schemas (FileReadResult|FileOperationError)
// becomes one of its own (FileReadResultOrFileOperationError), which a
// generated client gives accessors (AsFileReadResult) an inline one lacks.
type components map[string]any

func (sc components) operation(e Endpoint) map[string]any {
	op := map[string]any{"operationId": OperationID(e), "summary": e.Summary}
	var params []any
	for _, f := range strings.Fields(e.Query) {
		name, typ, _ := strings.Cut(f, ":")
		name, required := strings.CutSuffix(name, "!")
		params = append(params, map[string]any{"name": name, "in": "query", "required": required, "schema": sc.schemaOf(typ)})
	}
	if len(params) > 0 {
		op["parameters"] = params
	}
	switch e.Request {
	case "":
	case RequestMultipart:
		op["requestBody"] = map[string]any{"required": true, "content": map[string]any{"multipart/form-data": map[string]any{
			"schema": map[string]any{"type": "object", "required": []any{"file"}, "properties": map[string]any{
				"path": map[string]any{"type": "string", "description": "where the file lands (a directory: inside it); before file"},
				"file": map[string]any{"type": "string", "format": "binary"},
			}}}}}
	default:
		op["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": ref(e.Request)}}}
	}
	ok := map[string]any{"description": "done"}
	switch e.Response {
	case ResponseFile:
		ok["content"] = map[string]any{"application/octet-stream": map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}}
	case ResponseDocument:
		ok["content"] = map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}
	case ResponseWebSocket:
		ok = nil
	default:
		content := map[string]any{"application/json": map[string]any{"schema": sc.schemaOf(e.Response)}}
		if e.Stream {
			content["text/event-stream"] = map[string]any{"schema": map[string]any{"type": "string", "description": "with " +
				"Accept: text/event-stream: events start, output (as the command writes) and result (the JSON answer); " +
				"Last-Event-ID resumes a broken stream"}}
		}
		ok["content"] = content
	}
	failed := map[string]any{"description": "a failure (any status): the envelope with success false",
		"content": map[string]any{"application/json": map[string]any{"schema": ref(EnvelopeSchema)}}}
	if ok == nil {
		op["responses"] = map[string]any{"101": map[string]any{"description": "the WebSocket terminal"}, "default": failed}
	} else {
		op["responses"] = map[string]any{"200": ok, "default": failed}
	}
	return op
}

func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }

// object is a Schemas field list as a JSON Schema object.
func (sc components) object(fields, description string) map[string]any {
	props := map[string]any{}
	var required []any
	for _, f := range strings.Fields(fields) {
		name, typ, _ := strings.Cut(f, ":")
		name, req := strings.CutSuffix(name, "!")
		if req {
			required = append(required, name)
		}
		props[name] = sc.schemaOf(typ)
	}
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	if description != "" {
		s["description"] = description
	}
	return s
}

// schemaOf turns a type of the grammar (api.go) into a JSON Schema.
func (sc components) schemaOf(typ string) map[string]any {
	typ = strings.TrimSpace(typ)
	if inner, nullable := strings.CutSuffix(typ, "?"); nullable {
		s := sc.schemaOf(inner)
		if len(s) == 0 { // any: null included
			return s
		}
		return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
	}
	if alts := SplitTop(typ, '|'); len(alts) > 1 {
		branches := make([]any, len(alts))
		for i, a := range alts {
			branches[i] = sc.schemaOf(a)
		}
		union := map[string]any{"oneOf": branches}
		if !named.MatchString(typ) {
			return union
		}
		name := strings.ReplaceAll(typ, "|", "Or")
		sc[name] = union
		return ref(name)
	}
	if inner, ok := strings.CutPrefix(typ, responseEnvelope); ok {
		return sc.object("success:bool message:str? hint:str? data:"+strings.TrimSuffix(inner, "]")+"?", "")
	}
	switch {
	case strings.HasPrefix(typ, "["):
		return map[string]any{"type": "array", "items": sc.schemaOf(typ[1 : len(typ)-1])}
	case strings.HasPrefix(typ, "{"):
		return map[string]any{"type": "object", "additionalProperties": sc.schemaOf(typ[1 : len(typ)-1])}
	}
	switch typ {
	case "any":
		return map[string]any{}
	case "obj":
		return map[string]any{"type": "object"}
	case "str", "int", "num", "bool":
		return map[string]any{"type": map[string]string{"str": "string", "int": "integer", "num": "number", "bool": "boolean"}[typ]}
	}
	return ref(typ)
}

// SplitTop splits s at sep outside brackets.
func SplitTop(s string, sep byte) []string {
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
