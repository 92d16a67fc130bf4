package patch

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/internal/testenv"
)

// content returns n bytes of compressible but varied data.
func content(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + r.IntN(8))
		if r.IntN(4) == 0 {
			b[i] = byte(r.Uint32())
		}
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	old := content(1, 2<<20)
	for name, next := range map[string][]byte{
		"append":  append(append([]byte(nil), old...), 'x'),
		"middle":  append(append(append([]byte(nil), old[:1<<20]...), "an edit in the middle"...), old[1<<20:]...),
		"same":    old,
		"shorter": old[4096 : 1<<20],
	} {
		t.Run(name, func(t *testing.T) {
			p, err := Make(old, next)
			if err != nil {
				t.Fatal(err)
			}
			// The whole point: a small change makes a small patch.
			if len(p) > 4096 {
				t.Errorf("patch of %d bytes for a small change to %d bytes", len(p), len(next))
			}
			if c := Compressed(next); len(p) >= c {
				t.Errorf("patch %d bytes, not smaller than the content compressed alone (%d)", len(p), c)
			}
			got, err := Apply(old, p, int64(len(next)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, next) {
				t.Fatal("rebuilt content differs")
			}
			again, _ := Make(old, next)
			if !bytes.Equal(again, p) {
				t.Error("the same contents made different patches")
			}
		})
	}
}

// TestZstdReadsIt checks the format is what `zstd --patch-from` reads, so
// an operator can rebuild a file by hand.
func TestZstdReadsIt(t *testing.T) {
	testenv.RequireTools(t, []string{"zstd"})
	old := content(2, 300<<10)
	next := append(append([]byte(nil), old...), "appended"...)
	p, err := Make(old, next)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{"old": old, "p.zst": p} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("zstd", "-q", "-d", "-c", "--patch-from="+filepath.Join(dir, "old"), filepath.Join(dir, "p.zst")).Output()
	if err != nil {
		t.Fatalf("zstd --patch-from: %v", err)
	}
	if !bytes.Equal(out, next) {
		t.Fatal("zstd rebuilt other content")
	}
}

func TestApplyRefuses(t *testing.T) {
	old := content(3, 200<<10)
	next := append(append([]byte(nil), old...), 'y')
	p, err := Make(old, next)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(next))
	for name, tc := range map[string]struct {
		old, p []byte
		size   int64
	}{
		"size too small": {old, p, n - 1},
		"size too large": {old, p, n + 1},
		"truncated":      {old, p[:len(p)/2], n},
		"not zstd":       {old, []byte("this is not a zstd frame at all"), n},
		"empty":          {old, nil, n},
		"over the limit": {old, p, MaxContent + 1},
		"negative size":  {old, p, -1},
		"two frames":     {old, append(append([]byte(nil), p...), p...), n},
		"corrupted":      {old, flip(p, len(p)-5), n},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Apply(tc.old, tc.p, tc.size); !errors.Is(err, ErrPatch) {
				t.Fatalf("got %v, want ErrPatch", err)
			}
		})
	}
	// Another base is not caught by the patch (that is the caller's hash
	// check), but it cannot make more than size bytes either.
	other := content(4, 200<<10)
	if got, err := Apply(other, p, n); err == nil && bytes.Equal(got, next) {
		t.Fatal("another base rebuilt the same content")
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0xff
	return c
}

func TestMakeLimits(t *testing.T) {
	if _, err := Make(content(5, 100), content(6, 100)); err == nil {
		t.Error("made a patch of a small file")
	}
	if Worth(0, MinContent) || Worth(1, MaxContent+1) || !Worth(1, MinContent) {
		t.Error("Worth limits")
	}
}

// FuzzApply feeds arbitrary patches: Apply never returns more or fewer
// bytes than asked and never panics.
func FuzzApply(f *testing.F) {
	old := content(7, 80<<10)
	p, _ := Make(old, append(append([]byte(nil), old...), 'z'))
	f.Add(p, int64(len(old)+1))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd}, int64(10))
	f.Fuzz(func(t *testing.T, p []byte, size int64) {
		got, err := Apply(old, p, size)
		if err == nil && int64(len(got)) != size {
			t.Fatalf("%d bytes, asked for %d", len(got), size)
		}
	})
}

func TestSimilar(t *testing.T) {
	old := content(8, 300<<10)
	inserted := append(append(append([]byte(nil), old[:1000]...), "inserted near the start, shifting all that follows"...), old[1000:]...)
	reversed := make([]byte, len(old))
	for i := range old {
		reversed[i] = old[len(old)-1-i]
	}
	half := append(append([]byte(nil), old[:100<<10]...), content(9, 200<<10)...)
	for name, tc := range map[string]struct {
		next []byte
		want bool
	}{
		"appended":    {append(append([]byte(nil), old...), 'x'), true},
		"inserted":    {inserted, true},
		"a third old": {half, true},
		"reversed":    {reversed, false},
		"unrelated":   {content(10, 300<<10), false},
	} {
		if got := Similar(old, tc.next); got != tc.want {
			t.Errorf("%s: Similar = %v, want %v", name, got, tc.want)
		}
	}
}
