package sandbox

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// The AIO 1.9.4 response contract is sandboxspec's Schemas, Enums and
// Endpoints (the same tables the sandbox's OpenAPI document is built from):
// checkResponse validates an answer against the schema of its 200, and
// every other status against the generic Response (a 422 also against
// HTTPValidationError), as the SDKs decode them.

// aioEndpoints maps "METHOD path" (the server's pattern) to the schema of
// its JSON 200 answer. Freeze and thaw are checked against a server process
// of their own (admin_linux_test.go): a freeze here would stop every test's
// commands.
var aioEndpoints = func() map[string]string {
	m := map[string]string{}
	for _, e := range sandboxspec.Endpoints {
		if e.Path == sandboxspec.FreezePath || e.Path == sandboxspec.ThawPath {
			continue
		}
		if strings.HasPrefix(e.Response, "Response[") || sandboxspec.Schemas[e.Response] != "" {
			m[e.Method+" "+e.Path] = e.Response
		}
	}
	return m
}()

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
	if alts := sandboxspec.SplitTop(typ, '|'); len(alts) > 1 {
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
	if values, ok := sandboxspec.Enums[typ]; ok {
		if str, isStr := v.(string); !isStr || !slices.Contains(values, str) {
			return schemaError{at, fmt.Sprintf("want one of %s %v, got %v", typ, values, v)}
		}
		return nil
	}
	if want == "" {
		fields, ok := sandboxspec.Schemas[typ]
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
