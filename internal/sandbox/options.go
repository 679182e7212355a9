package sandbox

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
)

// unsupported is an optional AIO request field this server does not
// implement. Accepting and ignoring it would hand the caller a wrong answer
// with no sign, so decode refuses it with a 422 naming the field unless it
// is absent, null, or equal to the value in the field's `accept` tag: the
// one value whose meaning is what this server does anyway (usually the AIO
// default, which SDKs may send explicitly). An optional `why` tag says what
// the option would need.
type unsupported struct{ raw json.RawMessage }

func (u *unsupported) UnmarshalJSON(b []byte) error {
	u.raw = append(u.raw[:0], b...)
	return nil
}

var unsupportedType = reflect.TypeFor[unsupported]()

// refuseUnsupported returns the 422 for the first unsupported field of the
// struct dst points to that carries a value other than null or its accepted
// one.
func refuseUnsupported(dst any) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	v = v.Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Type != unsupportedType {
			continue
		}
		raw := bytes.TrimSpace(v.Field(i).Interface().(unsupported).raw)
		def, hasDef := f.Tag.Lookup("accept")
		if len(raw) == 0 || string(raw) == "null" || hasDef && sameJSON(raw, []byte(def)) {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		msg := name + ": not supported by this sandbox; send it absent or null"
		if hasDef {
			msg = strings.Replace(msg, " or null", ", null or "+def, 1)
		}
		if why := f.Tag.Get("why"); why != "" {
			msg += " (" + why + ")"
		}
		return invalid(name, "%s", msg)
	}
	return nil
}

// sameJSON reports whether two JSON texts denote the same value.
func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}
