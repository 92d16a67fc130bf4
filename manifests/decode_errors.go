package manifests

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode"
)

// plainJSONError rewrites an error of the JSON decoder in the document's
// words: a value of the wrong kind names its key path and the kind
// expected, never a Go type; the "json: " prefix goes.
func plainJSONError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		where := "the document"
		if f := keyPath(te.Field); f != "" {
			where = fmt.Sprintf("%q", f)
		}
		kind := kindOf(te.Type)
		if n, ok := strings.CutPrefix(te.Value, "number "); ok && (kind == "a whole number" || kind == "a number") {
			// The decoder names the value only when it does not fit.
			return fmt.Errorf("%s: the number %s is out of range (offset %d)", where, n, te.Offset)
		}
		return fmt.Errorf("%s: a JSON %s where %s is expected (offset %d)", where, te.Value, kind, te.Offset)
	}
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

// keyPath is the decoder's field path without the names of embedded Go
// structs, which it includes (strata's keys are lower case; Go's type
// names are not).
func keyPath(field string) string {
	var keep []string
	for _, p := range strings.Split(field, ".") {
		if p != "" && !unicode.IsUpper([]rune(p)[0]) {
			keep = append(keep, p)
		}
	}
	return strings.Join(keep, ".")
}

// kindOf describes the JSON value a Go type decodes from: by its kind,
// so that named scalars (EntryType, Mode) read as strings and numbers.
func kindOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(textUnmarshaler) {
		return "a string" // a mode ("0644"), a time
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map:
		return "a mapping"
	}
	return ValueKind(t.String())
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// ValueKind describes a Go type, as the JSON and YAML decoders print it
// ("int64", "[]string", "*manifests.Ref"), as the kind of value a
// document holds there: "a whole number", "a list", "a mapping (ref)".
func ValueKind(t string) string {
	t = strings.TrimLeft(t, "*")
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["):
		return "a mapping"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "a whole number"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "time.Duration":
		return "a duration"
	}
	return "a mapping (" + words(t[strings.LastIndexByte(t, '.')+1:]) + ")"
}

// words splits a CamelCase name into lower-case words.
func words(name string) string {
	var b strings.Builder
	for i, r := range name {
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// DocName returns what kind of document v (a pointer to what it decodes
// into) is, in words: "overlay manifest" for *OverlayManifest.
func DocName(v any) string {
	t := reflect.TypeOf(v)
	for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice) {
		t = t.Elem()
	}
	if t == nil || t.Name() == "" {
		return "document"
	}
	return words(t.Name())
}
