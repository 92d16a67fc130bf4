package compress_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/strata-dev/strata/internal/compress"
)

func compressBytes(t *testing.T, a compress.Algorithm, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := compress.NewWriter(&buf, a)
	if err != nil {
		t.Fatalf("NewWriter(%s): %v", a, err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatalf("%s write: %v", a, err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("%s close: %v", a, err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	inputs := map[string][]byte{
		"text": []byte(strings.Repeat("strata overlay archive\n", 5000)),
		"binary": func() []byte {
			b := make([]byte, 70000)
			for i := range b {
				b[i] = byte(i * 7 % 251)
			}
			return b
		}(),
		"short": []byte("hi"),
		"empty": {},
	}
	for _, a := range []compress.Algorithm{compress.Zstd, compress.Xz, compress.Gzip} {
		for name, data := range inputs {
			packed := compressBytes(t, a, data)
			if len(data) > 1000 && name == "text" && len(packed) >= len(data) {
				t.Errorf("%s/%s: %d bytes compressed to %d", a, name, len(data), len(packed))
			}
			again := compressBytes(t, a, data)
			if !bytes.Equal(packed, again) {
				t.Errorf("%s/%s: output is not deterministic", a, name)
			}
			r, got, err := compress.NewReader(bytes.NewReader(packed))
			if err != nil {
				t.Fatalf("%s/%s: NewReader: %v", a, name, err)
			}
			if got != a {
				t.Errorf("%s/%s: detected %q", a, name, got)
			}
			out, err := io.ReadAll(r)
			if err != nil {
				t.Fatalf("%s/%s: read: %v", a, name, err)
			}
			if err := r.Close(); err != nil {
				t.Errorf("%s/%s: close: %v", a, name, err)
			}
			if !bytes.Equal(out, data) {
				t.Errorf("%s/%s: round trip gave %d bytes, want %d", a, name, len(out), len(data))
			}
		}
	}
}

func TestNone(t *testing.T) {
	for name, data := range map[string][]byte{
		"tar-like":    append([]byte("etc/passwd\x00"), make([]byte, 1000)...),
		"short":       []byte("a"),
		"empty":       {},
		"almost gzip": {0x1f, 0x00, 0x01},
	} {
		packed := compressBytes(t, compress.None, data)
		if !bytes.Equal(packed, data) {
			t.Errorf("%s: none changed the data", name)
		}
		r, a, err := compress.NewReader(bytes.NewReader(packed))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if a != compress.None {
			t.Errorf("%s: detected %q, want none", name, a)
		}
		out, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(out, data) {
			t.Errorf("%s: read back %q, %v", name, out, err)
		}
		r.Close()
	}
	// The "" algorithm writes zstd.
	packed := compressBytes(t, "", []byte("default"))
	if _, a, err := compress.NewReader(bytes.NewReader(packed)); err != nil || a != compress.Zstd {
		t.Fatalf("default writer detected as %q, %v; want zstd", a, err)
	}
}

func TestCorruptStreams(t *testing.T) {
	data := []byte(strings.Repeat("payload ", 1000))
	for _, a := range []compress.Algorithm{compress.Zstd, compress.Xz, compress.Gzip} {
		packed := compressBytes(t, a, data)
		truncated := packed[:len(packed)/2]
		r, got, err := compress.NewReader(bytes.NewReader(truncated))
		if err == nil {
			if got != a {
				t.Errorf("%s: truncated stream detected as %q", a, got)
			}
			_, err = io.ReadAll(r)
			r.Close()
		}
		if err == nil {
			t.Errorf("%s: truncated stream read without error", a)
		}
	}
	// A magic number alone is not a valid stream.
	for _, magic := range [][]byte{{0x1f, 0x8b}, {0x28, 0xb5, 0x2f, 0xfd}, {0xfd, '7', 'z', 'X', 'Z', 0x00}} {
		r, _, err := compress.NewReader(bytes.NewReader(magic))
		if err == nil {
			_, err = io.ReadAll(r)
			r.Close()
		}
		if err == nil {
			t.Errorf("magic %x alone read without error", magic)
		}
	}
}

func TestParse(t *testing.T) {
	good := map[string]compress.Algorithm{
		"":     compress.Zstd,
		"zstd": compress.Zstd,
		"xz":   compress.Xz,
		"gzip": compress.Gzip,
		"none": compress.None,
	}
	for s, want := range good {
		got, err := compress.Parse(s)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", s, got, err, want)
		}
	}
	for _, s := range []string{"gz", "ZSTD", "lz4", "bzip2", " zstd", "zst"} {
		got, err := compress.Parse(s)
		if !errors.Is(err, compress.ErrUnknown) || got != "" {
			t.Errorf("Parse(%q) = %q, %v; want ErrUnknown", s, got, err)
		} else if !strings.Contains(err.Error(), s) {
			t.Errorf("Parse(%q) error %q does not name it", s, err)
		}
	}
	if _, err := compress.NewWriter(io.Discard, "lz4"); !errors.Is(err, compress.ErrUnknown) {
		t.Errorf("NewWriter(lz4) = %v, want ErrUnknown", err)
	}
}

func TestExt(t *testing.T) {
	for a, want := range map[compress.Algorithm]string{compress.Zstd: ".zst", compress.Xz: ".xz", compress.Gzip: ".gz", compress.None: ""} {
		if got := a.Ext(); got != want {
			t.Errorf("%s.Ext() = %q, want %q", a, got, want)
		}
	}
}

// An overlay's bytes do not depend on how its zstd stream was written:
// in many small writes, the way an archive is written, the stream is the
// one a synchronous encoder makes.
func TestZstdBytesIndependentOfConcurrency(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte('a' + r.IntN(8))
		if i%5 == 0 {
			data[i] = byte(r.Uint32())
		}
	}
	var got bytes.Buffer
	w, err := compress.NewWriter(&got, compress.Zstd)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 10_000 {
		if _, err := w.Write(data[off:min(off+10_000, len(data))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	sync, err := zstd.NewWriter(&want, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithWindowSize(compress.ZstdWindow))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sync.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := sync.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("zstd stream of %d bytes, want the synchronous encoder's %d", got.Len(), want.Len())
	}
}

// The streams strata writes ask a decoder for a window of ZstdWindow, not
// the encoder's default of 8 MiB, however large the input.
func TestZstdWindow(t *testing.T) {
	var buf bytes.Buffer
	w, err := compress.NewWriter(&buf, compress.Zstd)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 12<<20)
	for i := range data {
		data[i] = byte('a' + r.IntN(4))
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var h zstd.Header
	if err := h.Decode(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	if h.WindowSize != compress.ZstdWindow {
		t.Errorf("frame window %d bytes, want %d", h.WindowSize, compress.ZstdWindow)
	}
}
