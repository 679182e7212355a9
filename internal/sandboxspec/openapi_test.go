package sandboxspec

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestSchemaOf: the grammar's types as JSON Schema, without type arrays
// (null is an anyOf branch) and with a union of named schemas as a named
// component.
func TestSchemaOf(t *testing.T) {
	t.Parallel()
	null := map[string]any{"type": "null"}
	for _, c := range []struct {
		typ  string
		want map[string]any
		adds string // the component it adds
	}{
		{"str", map[string]any{"type": "string"}, ""},
		{"int?", map[string]any{"anyOf": []any{map[string]any{"type": "integer"}, null}}, ""},
		{"any?", map[string]any{}, ""},
		{"[num]", map[string]any{"type": "array", "items": map[string]any{"type": "number"}}, ""},
		{"{str?}", map[string]any{"type": "object", "additionalProperties": map[string]any{"anyOf": []any{map[string]any{"type": "string"}, null}}}, ""},
		{"FileInfo", map[string]any{"$ref": "#/components/schemas/FileInfo"}, ""},
		{"int|str", map[string]any{"oneOf": []any{map[string]any{"type": "integer"}, map[string]any{"type": "string"}}}, ""},
		{"FileReadResult|FileOperationError", map[string]any{"$ref": "#/components/schemas/FileReadResultOrFileOperationError"},
			"FileReadResultOrFileOperationError"},
	} {
		sc := components{}
		if got := sc.schemaOf(c.typ); !reflect.DeepEqual(got, c.want) {
			t.Errorf("schemaOf(%q) = %v, want %v", c.typ, got, c.want)
		}
		if c.adds != "" && sc[c.adds] == nil {
			t.Errorf("schemaOf(%q) added no %s", c.typ, c.adds)
		}
	}
}

// TestOpenAPIHasEveryEndpoint: each endpoint is one operation of the
// document, under its operationId, and each schema it names exists.
func TestOpenAPIHasEveryEndpoint(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths      map[string]map[string]json.RawMessage
		Components struct{ Schemas map[string]json.RawMessage }
	}
	if err := json.Unmarshal(OpenAPIJSON(), &doc); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, e := range Endpoints {
		var op struct{ OperationID string }
		raw := doc.Paths[e.Path][map[string]string{"GET": "get", "POST": "post", "DELETE": "delete"}[e.Method]]
		if err := json.Unmarshal(raw, &op); err != nil || op.OperationID != OperationID(e) {
			t.Errorf("%s %s: operation %s missing (%v)", e.Method, e.Path, OperationID(e), err)
		}
		if ids[op.OperationID] {
			t.Errorf("operationId %s twice", op.OperationID)
		}
		ids[op.OperationID] = true
		if e.Request != "" && e.Request != RequestMultipart && doc.Components.Schemas[e.Request] == nil {
			t.Errorf("%s %s: request schema %s missing", e.Method, e.Path, e.Request)
		}
	}
}
