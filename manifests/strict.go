package manifests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode"
)

// checkNames walks the JSON document b and refuses what encoding/json
// would otherwise take silently, and other JSON readers would read
// differently: a name twice in one object (encoding/json keeps the last)
// and a name that matches a field of the target type only when case is
// ignored ("ENTRIES" for "entries"; encoding/json folds case). t is the
// type the document decodes into; objects it does not describe (maps,
// interfaces, custom unmarshalers) are checked for exact duplicates only.
func checkNames(b []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return walkValue(dec, t, "$")
}

func walkValue(dec *json.Decoder, t reflect.Type, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	t = described(t)
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '{':
		return walkObject(dec, t, path)
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walkValue(dec, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ]
		return err
	}
	return fmt.Errorf("unexpected %q at %s", d, path)
}

func walkObject(dec *json.Decoder, t reflect.Type, path string) error {
	var fields map[string]reflect.Type
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = jsonFields(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	seen := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name, ok := tok.(string)
		if !ok {
			return fmt.Errorf("object name expected at %s", path)
		}
		key := name
		if fields != nil {
			key = foldName(name)
		}
		if prev, dup := seen[key]; dup {
			if prev == name {
				return fmt.Errorf("%w: %s: %q appears twice", errNames, path, name)
			}
			return fmt.Errorf("%w: %s: %q and %q differ only in case", errNames, path, prev, name)
		}
		seen[key] = name
		next := elem
		if fields != nil {
			ft, exact := fields[name]
			if !exact {
				for f := range fields {
					if foldName(f) == key {
						return fmt.Errorf("%w: %s: %q must be spelled %q", errNames, path, name, f)
					}
				}
			}
			next = ft // nil for an unknown name, which decoding refuses
		}
		if err := walkValue(dec, next, path+"."+name); err != nil {
			return err
		}
	}
	_, err := dec.Token() // }
	return err
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// described returns the type whose JSON shape the checks can follow (t
// without pointers), or nil for one they cannot: an interface or a type
// that decodes itself.
func described(t reflect.Type) reflect.Type {
	for t != nil {
		if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
			return nil
		}
		switch t.Kind() {
		case reflect.Pointer:
			t = t.Elem()
		case reflect.Interface:
			return nil
		default:
			return t
		}
	}
	return nil
}

var fieldCache sync.Map // reflect.Type -> map[string]reflect.Type

// jsonFields returns the JSON names of struct type t's fields, embedded
// structs' fields promoted, with their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			if et := described(f.Type); et != nil && et.Kind() == reflect.Struct {
				for n, ft := range jsonFields(et) {
					m[n] = ft
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}

// foldName folds name the way encoding/json matches names to fields:
// case-insensitively, with Unicode's simple folding (the Kelvin sign
// matches k, the long s matches s).
func foldName(name string) string {
	return strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, name)
}

// errNames marks what checkNames refuses; its other errors are syntax
// errors, which decoding reports in its own words.
var errNames = errors.New("ambiguous JSON names")
