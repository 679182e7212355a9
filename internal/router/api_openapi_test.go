package router

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/events"
)

// bodySchema names where the document describes a Go body: a component
// schema (optionally one of its properties), or an operation's JSON
// request or response.
type bodySchema struct {
	schema   string // components/schemas name
	property string // a property of that schema instead of the schema itself
	op       string // operationId
	status   string // the op's response status; "" = its request body
	// request: the body is decoded, not sent, so required says what a
	// client must send, which Go's decoding does not check.
	request bool
	// omit are the struct's fields this schema leaves out on purpose.
	omit []string
}

// apiBodies maps every body type of internal/api (and the lifecycle event
// of the SSE streams) to the schema that describes it.
var apiBodies = []struct {
	body   any
	schema bodySchema
}{
	// On every route but /api/, detail is never sent (it repeats the message
	// for FastAPI clients).
	{api.ErrorBody{}, bodySchema{schema: "Error", omit: []string{"detail"}}},
	{api.ErrorBody{}, bodySchema{schema: "ProvisionerError"}},
	{api.ErrorDetail{}, bodySchema{schema: "ErrorDetail"}},
	{api.Health{}, bodySchema{schema: "Health"}},
	{api.SessionsRevoked{}, bodySchema{op: "statusRevokeOwn", status: "200"}},
	{api.Sandbox{}, bodySchema{schema: "Sandbox"}},
	{api.ThreadData{}, bodySchema{schema: "ThreadData"}},
	{api.CreateSandbox{}, bodySchema{schema: "CreateSandbox"}},
	{api.Template{}, bodySchema{schema: "Template"}},
	{api.TemplateList{}, bodySchema{schema: "TemplateList"}},
	{api.Frozen{}, bodySchema{op: "freezeThread", status: "200"}},
	{api.SandboxMetrics{}, bodySchema{schema: "SandboxMetrics"}},
	{api.MetricsSample{}, bodySchema{schema: "MetricsSample"}},
	{api.AdminSandbox{}, bodySchema{schema: "AdminSandbox"}},
	{api.AdminSandboxList{}, bodySchema{schema: "AdminList"}},
	{api.AdminDestroyed{}, bodySchema{schema: "AdminDestroyed"}},
	{api.ThreadRemoved{}, bodySchema{schema: "AdminThreadRemoved"}},
	{api.StatsRow{}, bodySchema{schema: "AdminStatsRow"}},
	{api.StatsList{}, bodySchema{schema: "AdminStats"}},
	{api.PruneReport{}, bodySchema{schema: "PruneReport"}},
	{api.Pruned{}, bodySchema{schema: "PruneItem"}},
	{api.Checkpoint{}, bodySchema{schema: "Checkpoint"}},
	{api.CreatePreview{}, bodySchema{schema: "CreatePreview"}},
	{api.Preview{}, bodySchema{op: "createPreview", status: "201"}},
	{api.PreviewList{}, bodySchema{op: "listPreviews", status: "200"}},
	{api.PreviewKey{}, bodySchema{op: "adminRotatePreviewKey", status: "200"}},
	{api.CheckpointList{}, bodySchema{op: "listCheckpoints", status: "200"}},
	{api.CreateCheckpoint{}, bodySchema{op: "createCheckpoint"}},
	{api.RestoreCheckpoint{}, bodySchema{op: "restoreCheckpoint"}},
	{api.Restored{}, bodySchema{op: "restoreCheckpoint", status: "200"}},
	{api.Fork{}, bodySchema{op: "forkThread"}},
	{api.ProvisionerCreate{}, bodySchema{schema: "ProvisionerCreate", request: true}},
	{api.ExtraMount{}, bodySchema{schema: "ExtraMount", request: true}},
	{api.Egress{}, bodySchema{schema: "Egress", request: true}},
	{api.ProvisionerSandbox{}, bodySchema{schema: "ProvisionerSandbox"}},
	{api.MountOutcome{}, bodySchema{schema: "MountOutcome"}},
	{api.ProvisionerList{}, bodySchema{schema: "ProvisionerList"}},
	{api.ProvisionerDeleted{}, bodySchema{schema: "ProvisionerDeleted"}},
	{api.ProvisionerCapabilities{}, bodySchema{schema: "ProvisionerCapabilities"}},
	{api.ProvisionerDetail{}, bodySchema{schema: "ProvisionerNotFound"}},
	{api.MountContractChanged{}, bodySchema{schema: "MountContractChanged", property: "detail"}},
	{events.Event{}, bodySchema{schema: "LifecycleEvent"}},
}

// TestOpenAPIMatchesAPIBodies holds the document and the Go bodies together:
// the same property names, JSON types, and every field always sent listed
// as required where the schema lists any.
func TestOpenAPIMatchesAPIBodies(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	for _, b := range apiBodies {
		typ := reflect.TypeOf(b.body)
		s, err := b.schema.resolve(doc)
		if err != nil {
			t.Errorf("%v: %v", typ, err)
			continue
		}
		for _, m := range compareBody(typ, s, b.schema.decoded(), b.schema.omit) {
			t.Errorf("%v ↔ %s: %s", typ, b.schema, m)
		}
	}
}

// TestAPIBodiesAreAllMapped: a body added to internal/api gets a schema,
// its own or its embedding body's.
func TestAPIBodiesAreAllMapped(t *testing.T) {
	t.Parallel()
	reached := map[reflect.Type]bool{}
	for _, b := range apiBodies {
		reach(reflect.TypeOf(b.body), reached)
	}
	apiPkg := reflect.TypeFor[api.Sandbox]().PkgPath()
	mapped := map[string]bool{}
	for t := range reached {
		if t.PkgPath() == apiPkg {
			mapped[t.Name()] = true
		}
	}
	files, err := filepath.Glob("../api/*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, spec := range g.Specs {
				name := spec.(*ast.TypeSpec).Name.Name
				if ast.IsExported(name) && !strings.HasSuffix(file, "_test.go") && !mapped[name] {
					t.Errorf("api.%s has no schema in apiBodies", name)
				}
			}
		}
	}
}

// reach adds t and the struct types its fields hold to seen.
func reach(t reflect.Type, seen map[reflect.Type]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return
	}
	seen[t] = true
	for i := range t.NumField() {
		reach(t.Field(i).Type, seen)
	}
}

// decoded: the gateway reads this body rather than sends it.
func (b bodySchema) decoded() bool { return b.request || b.op != "" && b.status == "" }

func (b bodySchema) String() string {
	switch {
	case b.op != "" && b.status == "":
		return b.op + " request"
	case b.op != "":
		return b.op + " " + b.status
	case b.property != "":
		return b.schema + "." + b.property
	}
	return b.schema
}

func (b bodySchema) resolve(doc *openapi3.T) (*openapi3.Schema, error) {
	if b.op == "" {
		ref := doc.Components.Schemas[b.schema]
		if ref == nil {
			return nil, fmt.Errorf("no schema %s", b.schema)
		}
		if b.property == "" {
			return ref.Value, nil
		}
		if p := ref.Value.Properties[b.property]; p != nil {
			return p.Value, nil
		}
		return nil, fmt.Errorf("schema %s has no property %s", b.schema, b.property)
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.OperationID != b.op {
				continue
			}
			var content openapi3.Content
			if b.status == "" {
				if op.RequestBody == nil {
					return nil, fmt.Errorf("%s has no request body", b.op)
				}
				content = op.RequestBody.Value.Content
			} else if r := op.Responses.Value(b.status); r != nil {
				content = r.Value.Content
			}
			if mt := content.Get("application/json"); mt != nil && mt.Schema != nil {
				return mt.Schema.Value, nil
			}
			return nil, fmt.Errorf("%s has no JSON body", b)
		}
	}
	return nil, fmt.Errorf("no operation %s", b.op)
}

// jsonField is one property a struct encodes.
type jsonField struct {
	name string
	typ  reflect.Type
	// always: encoding/json writes it whatever its value (no omitempty or
	// omitzero, not promoted through an embedded pointer).
	always bool
}

// jsonFields lists t's properties as encoding/json writes them, embedded
// structs' promoted.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for _, f := range reflect.VisibleFields(t) {
		if len(f.Index) > 1 || !f.IsExported() && !f.Anonymous {
			continue // promoted ones are reached through their embedding field
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			ptr := ft.Kind() == reflect.Pointer
			if ptr {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for _, sub := range jsonFields(ft) {
					sub.always = sub.always && !ptr
					out = append(out, sub)
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		omit := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
		out = append(out, jsonField{name: name, typ: ft, always: !omit})
	}
	return out
}

var timeType = reflect.TypeFor[time.Time]()

// compareBody lists where t's JSON encoding and schema s disagree; request:
// t is decoded (required is not checked); omit are properties of t the
// schema leaves out.
func compareBody(t reflect.Type, s *openapi3.Schema, request bool, omit []string) []string {
	return compareAt("", t, s, request, omit)
}

func compareAt(at string, t reflect.Type, s *openapi3.Schema, request bool, omit []string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s == nil {
		return []string{at + ": no schema"}
	}
	if t.Kind() == reflect.Interface {
		return nil // any: the schema says what it holds
	}
	want := jsonType(t)
	if !s.Type.Includes(want) {
		return []string{fmt.Sprintf("%s: Go encodes %s %s, the schema says %v", name(at), want, t, s.Type.Slice())}
	}
	switch want {
	case "array":
		if s.Items == nil {
			return []string{name(at) + ": array without items"}
		}
		return compareAt(at+"[]", t.Elem(), s.Items.Value, request, nil)
	case "object":
		if t.Kind() == reflect.Map {
			if ap := s.AdditionalProperties.Schema; ap != nil {
				return compareAt(at+"{}", t.Elem(), ap.Value, request, nil)
			}
			return nil
		}
		return compareObject(at, t, s, request, omit)
	}
	return nil
}

func compareObject(at string, t reflect.Type, s *openapi3.Schema, request bool, omit []string) []string {
	var out []string
	fields := map[string]jsonField{}
	for _, f := range jsonFields(t) {
		if !slices.Contains(omit, f.name) {
			fields[f.name] = f
		}
	}
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	for _, n := range slices.Sorted(maps.Keys(fields)) {
		f := fields[n]
		p := s.Properties[n]
		if p == nil {
			out = append(out, fmt.Sprintf("%s: Go field %q is not in the schema", name(at), n))
			continue
		}
		if !request && len(s.Required) > 0 && f.always && !required[n] {
			out = append(out, name(at+"."+n)+": always sent, not required")
		}
		out = append(out, compareAt(at+"."+n, f.typ, p.Value, request, nil)...)
	}
	for _, n := range slices.Sorted(maps.Keys(s.Properties)) {
		if _, ok := fields[n]; !ok {
			out = append(out, fmt.Sprintf("%s: schema property %q is not in the Go type", name(at), n))
		}
	}
	return out
}

func name(at string) string {
	if at == "" {
		return "body"
	}
	return strings.TrimPrefix(at, ".")
}

// jsonType is the JSON Schema type encoding/json writes t as.
func jsonType(t reflect.Type) string {
	if t == timeType {
		return "string"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "string" // base64
		}
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return t.Kind().String()
}

// The comparator is only worth its table if it fails on a rename: these
// rename one property in a copy of each side and expect to hear of it.

func TestCompareBodyCatchesASchemaRename(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	orig := doc.Components.Schemas["Sandbox"].Value
	if got := compareBody(reflect.TypeFor[api.Sandbox](), orig, false, nil); len(got) != 0 {
		t.Fatalf("the unmodified schema mismatches: %v", got)
	}
	renamed := *orig
	renamed.Properties = maps.Clone(orig.Properties)
	renamed.Properties["capability_url"] = renamed.Properties["sandbox_url"]
	delete(renamed.Properties, "sandbox_url")
	got := strings.Join(compareBody(reflect.TypeFor[api.Sandbox](), &renamed, false, nil), "\n")
	for _, want := range []string{`Go field "sandbox_url" is not in the schema`, `schema property "capability_url" is not in the Go type`} {
		if !strings.Contains(got, want) {
			t.Errorf("renamed schema property: want %q in\n%s", want, got)
		}
	}

	unrequired := *orig
	unrequired.Required = slices.DeleteFunc(slices.Clone(orig.Required), func(r string) bool { return r == "url" })
	if got := compareBody(reflect.TypeFor[api.Sandbox](), &unrequired, false, nil); !slices.Contains(got, "url: always sent, not required") {
		t.Errorf("url dropped from required: got %v", got)
	}

	retyped := *orig
	retyped.Properties = maps.Clone(orig.Properties)
	retyped.Properties["frozen"] = openapi3.NewSchemaRef("", openapi3.NewStringSchema())
	if got := compareBody(reflect.TypeFor[api.Sandbox](), &retyped, false, nil); len(got) != 1 || !strings.Contains(got[0], "frozen: Go encodes boolean") {
		t.Errorf("frozen typed string: got %v", got)
	}
}

func TestCompareBodyCatchesAStructRename(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	// A scratch copy of api.Sandbox whose sandbox_url is spelt
	// capability_url, and whose nested data renames bytes.
	renamed := withTag(reflect.TypeFor[api.Sandbox](), "SandboxURL", `json:"capability_url"`)
	got := strings.Join(compareBody(renamed, doc.Components.Schemas["Sandbox"].Value, false, nil), "\n")
	for _, want := range []string{`Go field "capability_url" is not in the schema`, `schema property "sandbox_url" is not in the Go type`} {
		if !strings.Contains(got, want) {
			t.Errorf("renamed Go field: want %q in\n%s", want, got)
		}
	}

	data := withTag(reflect.TypeFor[api.ThreadData](), "Bytes", `json:"size"`)
	nested := withType(reflect.TypeFor[api.Sandbox](), "Data", reflect.PointerTo(data))
	got = strings.Join(compareBody(nested, doc.Components.Schemas["Sandbox"].Value, false, nil), "\n")
	if !strings.Contains(got, `data: Go field "size" is not in the schema`) {
		t.Errorf("renamed nested Go field: got\n%s", got)
	}

	embedded := withTag(reflect.TypeFor[api.Stats](), "PIDs", `json:"processes"`)
	row := reflect.StructOf([]reflect.StructField{
		{Name: "SandboxRecord", Type: reflect.TypeFor[api.SandboxRecord](), Anonymous: true},
		{Name: "Stats", Type: reflect.PointerTo(embedded), Anonymous: true},
		{Name: "Error", Type: reflect.TypeFor[string](), Tag: `json:"error,omitempty"`},
	})
	got = strings.Join(compareBody(row, doc.Components.Schemas["AdminStatsRow"].Value, false, nil), "\n")
	if !strings.Contains(got, `Go field "processes" is not in the schema`) {
		t.Errorf("renamed field of an embedded struct: got\n%s", got)
	}
}

// withTag is a copy of struct t with field's tag replaced.
func withTag(t reflect.Type, field string, tag reflect.StructTag) reflect.Type {
	return modified(t, field, func(f *reflect.StructField) { f.Tag = tag })
}

// withType is a copy of struct t with field's type replaced.
func withType(t reflect.Type, field string, typ reflect.Type) reflect.Type {
	return modified(t, field, func(f *reflect.StructField) { f.Type = typ })
}

func modified(t reflect.Type, field string, change func(*reflect.StructField)) reflect.Type {
	fields := make([]reflect.StructField, t.NumField())
	for i := range fields {
		fields[i] = t.Field(i)
		if fields[i].Name == field {
			change(&fields[i])
		}
	}
	return reflect.StructOf(fields)
}
