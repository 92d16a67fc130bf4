package manifests

import (
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
	s := &nameScanner{b: b}
	if err := s.value(t); err != nil {
		return err
	}
	s.ws()
	if s.i != len(s.b) {
		return errTrailing
	}
	return nil
}

// errTrailing is data after the document's value.
var errTrailing = errors.New("trailing data")

// unknownFieldError is a name no field of the object's type has: what
// json.Decoder.DisallowUnknownFields refuses, found by the same walk.
type unknownFieldError struct{ where, name string }

func (e *unknownFieldError) Error() string {
	if e.where == "$" {
		return fmt.Sprintf("unknown field %q", e.name)
	}
	return fmt.Sprintf("unknown field %q in %s", e.name, e.where)
}

// nameScanner walks a JSON document's bytes just far enough to see every
// object's names (json.Decoder.Token allocates per token and costs four
// times the decoding it guards). It is lenient with syntax: a document it
// cannot follow is left to the decoder, which reports the error.
type nameScanner struct {
	b    []byte
	i    int
	path []step // names and indexes down to the value being read
}

// maxDepth bounds nesting as encoding/json does (it refuses deeper
// documents itself): a document of a million '[' must not recurse a
// million times.
const maxDepth = 10000

// step is one level of a path: an object name, or an array index.
type step struct {
	name  string
	index int // -1 for a name
}

// where formats the path to the current object, for errors.
func (s *nameScanner) where() string {
	var b strings.Builder
	b.WriteString("$")
	for _, p := range s.path {
		if p.index >= 0 {
			fmt.Fprintf(&b, "[%d]", p.index)
		} else {
			b.WriteString("." + p.name)
		}
	}
	return b.String()
}

var errSyntax = errors.New("json syntax")

func (s *nameScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// str reads a string at s.i and returns its raw bytes (between the
// quotes) and whether they hold escapes.
func (s *nameScanner) str() (raw []byte, escaped bool, err error) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false, errSyntax
	}
	start := s.i + 1
	s.i++
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			escaped = true
			s.i += 2
			continue
		case '"':
			s.i++
			return s.b[start : s.i-1], escaped, nil
		}
		s.i++
	}
	return nil, false, errSyntax
}

// name reads an object name and returns its value.
func (s *nameScanner) name() (string, error) {
	start := s.i
	raw, escaped, err := s.str()
	if err != nil || !escaped {
		return string(raw), err
	}
	var v string
	if err := json.Unmarshal(s.b[start:s.i], &v); err != nil {
		return "", errSyntax
	}
	return v, nil
}

func (s *nameScanner) value(t reflect.Type) error {
	s.ws()
	if s.i >= len(s.b) || len(s.path) > maxDepth {
		return errSyntax
	}
	t = described(t)
	switch s.b[s.i] {
	case '{':
		s.i++
		return s.object(t)
	case '[':
		s.i++
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			return nil
		}
		for n := 0; ; n++ {
			s.path = append(s.path, step{index: n})
			if err := s.value(elem); err != nil {
				return err
			}
			s.path = s.path[:len(s.path)-1]
			if done, err := s.after(']'); done || err != nil {
				return err
			}
		}
	case '"':
		_, _, err := s.str()
		return err
	}
	// A number, true, false or null.
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', ']', '}', ' ', '\t', '\n', '\r':
			return nil
		}
		s.i++
	}
	return nil
}

func (s *nameScanner) object(t reflect.Type) error {
	var fields map[string]field
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = jsonFields(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	var buf [16]seenName
	seen := buf[:0] // objects are small: a scan beats a map
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		s.ws()
		start := s.i
		raw, escaped, err := s.str()
		if err != nil {
			return err
		}
		var name string
		f, exact := field{}, false
		if fields != nil && !escaped {
			f, exact = fields[string(raw)] // no allocation for the lookup
		}
		if exact {
			name = f.name
		} else {
			s.i = start
			if name, err = s.name(); err != nil {
				return err
			}
			if fields != nil {
				f, exact = fields[name]
			}
		}
		key, next := name, elem
		if fields != nil {
			if exact {
				key = f.folded
			} else {
				key = foldName(name)
				for fn, f := range fields {
					if f.folded == key {
						return fmt.Errorf("%w: %s: %q must be spelled %q", errNames, s.where(), name, fn)
					}
				}
				return &unknownFieldError{where: s.where(), name: name}
			}
			next = f.typ
		}
		for _, p := range seen {
			if p.key != key {
				continue
			}
			if p.name == name {
				return fmt.Errorf("%w: %s: %q appears twice", errNames, s.where(), name)
			}
			return fmt.Errorf("%w: %s: %q and %q differ only in case", errNames, s.where(), p.name, name)
		}
		seen = append(seen, seenName{key: key, name: name})
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return errSyntax
		}
		s.i++
		s.path = append(s.path, step{name: name, index: -1})
		if err := s.value(next); err != nil {
			return err
		}
		s.path = s.path[:len(s.path)-1]
		if done, err := s.after('}'); done || err != nil {
			return err
		}
	}
}

// after reads what follows an element of an array or object: a comma
// (more to come) or the closing bracket (done).
func (s *nameScanner) after(closing byte) (done bool, err error) {
	s.ws()
	if s.i >= len(s.b) {
		return false, errSyntax
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return false, nil
	case closing:
		s.i++
		return true, nil
	}
	return false, errSyntax
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

// seenName is a name an object had, with its folded form.
type seenName struct{ key, name string }

// field is a struct field as JSON sees it: its name, type and name
// folded.
type field struct {
	name   string
	typ    reflect.Type
	folded string
}

var fieldCache sync.Map // reflect.Type -> map[string]field

// jsonFields returns the JSON names of struct type t's fields, embedded
// structs' fields promoted, with their types and folded names.
func jsonFields(t reflect.Type) map[string]field {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]field)
	}
	m, promoted, ambiguous := map[string]field{}, map[string]field{}, map[string]bool{}
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
					if _, twice := promoted[n]; twice {
						ambiguous[n] = true
					}
					promoted[n] = ft
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
		m[name] = field{name: name, typ: f.Type, folded: foldName(name)}
	}
	// A field of t's own hides an embedded struct's of the same name, as
	// in encoding/json; a name two embedded structs promote is left out
	// (encoding/json decodes neither, unless one is less deep: a name
	// strata's types never share, so refusing it is only stricter).
	for n, f := range promoted {
		if _, ok := m[n]; !ok && !ambiguous[n] {
			m[n] = f
		}
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
