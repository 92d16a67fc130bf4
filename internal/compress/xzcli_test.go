package compress

import (
	"bytes"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/testenv"
)

// mixed is n bytes of which every other 64 KiB is random, the rest text.
func mixed(n int) []byte {
	rnd := rand.New(rand.NewSource(2))
	out := make([]byte, 0, n)
	for i := 0; len(out) < n; i++ {
		chunk := make([]byte, 64<<10)
		if i%2 == 0 {
			rnd.Read(chunk)
		} else {
			copy(chunk, bytes.Repeat([]byte("port 80\nlisten [::]:80\n"), len(chunk)/24))
		}
		out = append(out, chunk...)
	}
	return out[:n]
}

func compressWith(t *testing.T, data []byte, tool string) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	w, err := newXzWriter(&buf, tool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		_ = w.Close()
		return nil, err
	}
	err = w.Close()
	return buf.Bytes(), err
}

// Where xz(1) is installed, NewWriter's xz streams are exactly what it
// writes at preset 6, one thread, CRC64, whatever XZ_OPT says; they
// decode to the input under the reader's bounds.
func TestXzWriterRunsXz(t *testing.T) {
	data := mixed(3 << 20)
	t.Setenv("XZ_OPT", "-0 -T2")
	testenv.RequireTools(t, []string{"xz"})
	if xzTool() == "" {
		t.Fatal("xz(1) is installed, but NewWriter does not use it")
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Xz)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XZ_OPT", "")
	if want := xzOf(t, data, "-6", "--check=crc64"); !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("NewWriter wrote %d bytes, xz -6 -T1 --check=crc64 %d: not xz(1)'s stream", buf.Len(), len(want))
	}
	got, err := readAll(t, buf.Bytes())
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("decoding: %d bytes, %v", len(got), err)
	}
}

// Without a working xz the Go encoder writes the stream; a command that
// does not answer --version as XZ Utils (make unit's stand-ins) is not
// used.
func TestXzWriterFallback(t *testing.T) {
	dir := t.TempDir()
	stub := filepath.Join(dir, "xz")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\necho 'xz: not available' >&2\nexit 127\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := probeXz(stub); got != "" {
		t.Fatalf("a failing xz was taken: %q", got)
	}
	if got := probeXz(filepath.Join(dir, "absent")); got != "" {
		t.Fatalf("a missing xz was taken: %q", got)
	}
	data := mixed(1 << 20)
	stream, err := compressWith(t, data, "")
	if err != nil {
		t.Fatal(err)
	}
	again, err := compressWith(t, data, "")
	if err != nil || !bytes.Equal(stream, again) {
		t.Fatalf("the Go encoder wrote different bytes for the same input (%v)", err)
	}
	got, err := readAll(t, stream)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("decoding: %d bytes, %v", len(got), err)
	}
}

// An xz that fails mid-stream is an error naming it and what it said,
// not a short archive.
func TestXzWriterToolFails(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "xz")
	script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'xz (XZ Utils) 5.4.1'; exit 0; fi\nhead -c 1000 >/dev/null\necho 'xz: (stdin): Cannot allocate memory' >&2\nexit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tool := probeXz(fake)
	if tool != fake {
		t.Fatalf("probe: %q", tool)
	}
	_, err := compressWith(t, mixed(4<<20), tool)
	if err == nil || !strings.Contains(err.Error(), "compressing with xz") || !strings.Contains(err.Error(), "Cannot allocate memory") {
		t.Fatalf("xz failing: %v", err)
	}
	// Closed again (a caller giving up): the same error, no hang.
	var buf bytes.Buffer
	w, err := newXzWriter(&buf, tool)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(w, bytes.NewReader(mixed(4<<20)))
	first := w.Close()
	if first == nil || w.Close().Error() != first.Error() {
		t.Fatalf("closing twice: %v", first)
	}
}
