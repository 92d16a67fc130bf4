package manifests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"

	jsonv2 "github.com/go-json-experiment/json"
)

// MaxManifestSize bounds every JSON document strata decodes (64 MiB). Image
// manifests list every file of an image, so they are the largest.
const MaxManifestSize = 64 << 20

// MaxIndexSize bounds a repository's index, read before its signature is
// checked: its overlays live in segments past the inline ones
// (SealAt), so even a repository of many long lines stays far below it.
const MaxIndexSize = 16 << 20

// Encode returns the canonical encoding of v: JSON with struct fields in
// declaration order, map keys sorted, two-space indentation and a final
// newline. The same value always encodes to the same bytes, so digests of
// encoded manifests are stable.
func Encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encoding %s: %w", DocName(v), err)
	}
	return buf.Bytes(), nil
}

// Decode strictly decodes one JSON document from b into v: unknown fields,
// a name twice in one object, a name that matches a field only when case
// is ignored, trailing data and documents over MaxManifestSize are errors.
func Decode(b []byte, v any) error { return decode(b, v, true) }

// decode is Decode; without fast, documents the walk passes go straight
// to encoding/json (what Decode did before json/v2, kept for the tests
// that hold the two to the same results).
func decode(b []byte, v any, fast bool) error {
	if len(b) > MaxManifestSize {
		return fmt.Errorf("%w: %d bytes (limit %d)", ErrTooLarge, len(b), MaxManifestSize)
	}
	// One walk over the names finds duplicates, case variants and
	// unknown fields (the strict decoder's checks), and trailing data;
	// then encoding/json's own decoding, which checks the syntax.
	var unknown *unknownFieldError
	switch err := checkNames(b, reflect.TypeOf(v)); {
	case errors.Is(err, errNames):
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	case errors.As(err, &unknown), errors.Is(err, errTrailing):
		return fmt.Errorf("%w: decoding %s: %v", ErrInvalid, DocName(v), err)
	case err == nil:
		// The names are known to be exact: decoded by json/v2, about
		// three times as fast as encoding/json on an image manifest. What
		// it refuses goes to encoding/json, which decides as it always
		// has and words the error (TestDecodeAgreesWithEncodingJSON).
		if fast && jsonv2.Unmarshal(b, v) == nil {
			return nil
		}
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() {
			rv.Elem().SetZero()
		}
		if err := json.Unmarshal(b, v); err != nil {
			return fmt.Errorf("%w: decoding %s: %v", ErrInvalid, DocName(v), plainJSONError(err))
		}
		return nil
	}
	// The walk could not follow the document (a syntax error): the
	// strict decoder says where.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: decoding %s: %v", ErrInvalid, DocName(v), plainJSONError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: decoding %s: trailing data", ErrInvalid, DocName(v))
	}
	return nil
}

// Unmarshal decodes a JSON document that may carry fields v does not
// have (a report or health document from another strata version), with
// errors in the document's words, never Go's. Callers bound b.
func Unmarshal(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return plainJSONError(err)
	}
	return nil
}

// ReadLimited reads all of r, failing with ErrTooLarge past limit bytes.
func ReadLimited(r io.Reader, limit int64) ([]byte, error) {
	// In chunks of at most readChunk, joined once at the end: an endless
	// or oversized stream costs the limit, not the two to three times it
	// that a doubling buffer allocates before the limit is reached.
	var chunks [][]byte
	var total int64
	for total <= limit {
		c := make([]byte, min(readChunk, limit+1-total))
		n, err := io.ReadFull(r, c)
		chunks, total = append(chunks, c[:n]), total+int64(n)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if total > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
	}
	if len(chunks) == 1 {
		return chunks[0], nil
	}
	b := make([]byte, 0, total)
	for _, c := range chunks {
		b = append(b, c...)
	}
	return b, nil
}

// readChunk is the step in which ReadLimited reads.
const readChunk = 1 << 20
