package compress

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"math/rand"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/testenv"
)

// xzOf compresses data with the xz command-line tool (args: preset,
// block size, check), the producer of most xz streams in the wild.
func xzOf(t *testing.T, data []byte, args ...string) []byte {
	t.Helper()
	testenv.RequireTools(t, []string{"xz"})
	cmd := exec.Command("xz", append([]string{"-c", "-T1"}, args...)...)
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("xz %v: %v", args, err)
	}
	return out
}

func readAll(t *testing.T, stream []byte) ([]byte, error) {
	t.Helper()
	r, a, err := NewReader(bytes.NewReader(stream))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if a != Xz {
		t.Fatalf("detected %s, want xz", a)
	}
	return io.ReadAll(r)
}

// Streams from xz(1) and from strata's own writer decode under the
// dictionary bound: presets, several blocks, every check type, uncompressed
// chunks (random data), several concatenated streams with padding.
func TestXzGuardPassesValidStreams(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	random := make([]byte, 3<<20)
	rnd.Read(random)
	text := bytes.Repeat([]byte("strata layers over a read-only root\n"), 80000)
	mixed := append(append([]byte{}, text[:1<<20]...), random[:1<<20]...)
	own := func(data []byte) []byte {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, Xz)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	cases := map[string]struct{ stream, want []byte }{
		"empty":                  {xzOf(t, nil), nil},
		"text -6":                {xzOf(t, text), text},
		"random -0 (stored)":     {xzOf(t, random, "-0"), random},
		"mixed, 256k blocks":     {xzOf(t, mixed, "--block-size=262144"), mixed},
		"sha256 check":           {xzOf(t, text, "--check=sha256"), text},
		"no check":               {xzOf(t, text, "--check=none"), text},
		"-9 (64 MiB dictionary)": {xzOf(t, text[:100000], "-9"), text[:100000]},
		"strata's writer":        {own(mixed), mixed},
		"two streams, padded": {
			append(append(xzOf(t, text[:5000]), 0, 0, 0, 0), xzOf(t, random[:5000], "--check=crc32")...),
			append(append([]byte{}, text[:5000]...), random[:5000]...),
		},
	}
	for name, c := range cases {
		got, err := readAll(t, c.stream)
		if err != nil || !bytes.Equal(got, c.want) {
			t.Errorf("%s: %d bytes, %v; want %d bytes", name, len(got), err, len(c.want))
		}
	}
}

// setDict rewrites the LZMA2 dictionary byte of the first block header of
// an xz stream from xz(1) (one filter, no sizes) and fixes its CRC32.
func setDict(t *testing.T, stream []byte, dict byte) []byte {
	t.Helper()
	out := append([]byte{}, stream...)
	h := out[12:]
	size := (int(h[0]) + 1) * 4
	if h[1] != 0 || h[2] != 0x21 || h[3] != 1 {
		t.Fatalf("unexpected block header % x", h[:size])
	}
	h[4] = dict
	crc := crc32.ChecksumIEEE(h[:size-4])
	h[size-4], h[size-3], h[size-2], h[size-1] = byte(crc), byte(crc>>8), byte(crc>>16), byte(crc>>24)
	return out
}

// A block asking for a dictionary over MaxXzDict is refused before the
// decoder allocates it: 1.5 GiB (the attack), 4 GiB, and a second stream
// doing it after a harmless first one.
func TestXzGuardRefusesHugeDictionary(t *testing.T) {
	small := xzOf(t, []byte("hello\n"))
	for name, stream := range map[string][]byte{
		"1.5 GiB":              setDict(t, small, 37), // 3 << 29
		"4 GiB":                setDict(t, small, 40),
		"128 MiB":              setDict(t, small, 30),
		"second stream's dict": append(append([]byte{}, small...), setDict(t, small, 37)...),
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := readAll(t, stream)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrXzDict) {
			t.Errorf("%s: %v, want ErrXzDict", name, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
			t.Errorf("%s: %d MiB allocated before the refusal", name, grew>>20)
		}
	}
	// The filter ID as a ten-byte, non-minimal varint (which a parser
	// beside the decoder gave up on): the decoder's own parse refuses it.
	if _, err := readAll(t, tenByteFilterID(t, small, 40)); !errors.Is(err, ErrXzDict) {
		t.Errorf("ten-byte filter ID asking 4 GiB: %v, want ErrXzDict", err)
	}
	// The same header at 64 MiB (xz -9) is accepted.
	if got, err := readAll(t, setDict(t, small, 26)); err != nil || string(got) != "hello\n" {
		t.Errorf("64 MiB dictionary: %q, %v", got, err)
	}
}

// FuzzXzReader feeds arbitrary bytes to the xz decoder (make fuzz runs
// it): nothing panics, and no dictionary over the bound is allocated.
func FuzzXzReader(f *testing.F) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, Xz)
	w.Write([]byte("strata\n"))
	w.Close()
	f.Add(buf.Bytes())
	f.Add(append(append([]byte{}, buf.Bytes()...), buf.Bytes()...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, _, err := NewReader(bytes.NewReader(b)); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(r, 1<<20))
			r.Close()
		}
	})
}

// A zstd frame asking for a window over MaxZstdWindow is refused before
// the decoder allocates it; strata's own frames and zstd --long=26 pass.
func TestZstdWindowCap(t *testing.T) {
	testenv.RequireTools(t, []string{"zstd"})
	data := bytes.Repeat([]byte("strata "), 1000)
	frame := func(args ...string) []byte {
		cmd := exec.Command("zstd", append([]string{"-c", "-q"}, args...)...)
		cmd.Stdin = bytes.NewReader(data)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("zstd %v: %v", args, err)
		}
		return out
	}
	read := func(stream []byte) error {
		r, _, err := NewReader(bytes.NewReader(stream))
		if err != nil {
			return err
		}
		defer r.Close()
		got, err := io.ReadAll(r)
		if err == nil && !bytes.Equal(got, data) {
			t.Fatalf("decoded %d bytes, want %d", len(got), len(data))
		}
		return err
	}
	// --no-content-size keeps the window in the frame header; -T0 none.
	if err := read(frame("--long=26", "--no-content-size")); err != nil {
		t.Errorf("a 64 MiB window: %v", err)
	}
	for _, long := range []string{"--long=27", "--long=31"} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := read(frame(long, "--no-content-size"))
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "window") {
			t.Errorf("zstd %s: %v, want a refusal of its window", long, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
			t.Errorf("zstd %s: %d MiB allocated before the refusal", long, grew>>20)
		}
	}
}

// tenByteFilterID replaces the first block header of an xz stream from
// xz(1) by one naming the LZMA2 filter with a ten-byte varint and
// dictionary byte dict.
func tenByteFilterID(t *testing.T, stream []byte, dict byte) []byte {
	t.Helper()
	old := (int(stream[12]) + 1) * 4
	h := []byte{4, 0x00, 0xa1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01, dict, 0, 0}
	crc := crc32.ChecksumIEEE(h)
	h = append(h, byte(crc), byte(crc>>8), byte(crc>>16), byte(crc>>24))
	out := append(append(append([]byte{}, stream[:12]...), h...), stream[12+old:]...)
	return out
}
