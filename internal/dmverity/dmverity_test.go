package dmverity_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/dmverity"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/verity"
)

// image writes blocks random data blocks with their tree appended
// (verity.Append) and returns the file and the target that checks it.
func image(t *testing.T, blocks int, salt []byte) (string, dmverity.Target) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "image")
	data := make([]byte, blocks*verity.BlockSize)
	_, _ = rand.Read(data)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := verity.Append(context.Background(), f, salt)
	if err != nil {
		t.Fatal(err)
	}
	return p, dmverity.Target{Device: p, Params: tr.Params, Root: tr.Root}
}

// The options a mapping is made with are the ones the tree was computed
// with: veritysetup, given them, accepts the image, with a salt and
// without, and refuses a changed block, another salt or another root.
func TestVerifyWithTheMappingsOptions(t *testing.T) {
	testenv.RequireTools(t, []string{"veritysetup"})
	ctx := context.Background()
	for _, salt := range [][]byte{nil, []byte("0123456789abcdef0123456789abcdef")} {
		p, tg := image(t, 300, salt)
		if err := dmverity.Verify(ctx, tg); err != nil {
			t.Fatalf("salt %q: %v", salt, err)
		}
		other := tg
		other.Params.Salt = []byte("another salt")
		if err := dmverity.Verify(ctx, other); err == nil {
			t.Errorf("salt %q: a wrong salt verified", salt)
		}
		other = tg
		other.Root = append([]byte{tg.Root[0] ^ 1}, tg.Root[1:]...)
		if err := dmverity.Verify(ctx, other); err == nil {
			t.Errorf("salt %q: a wrong root hash verified", salt)
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteAt([]byte{0xff, 0x00, 0xff}, 123*verity.BlockSize+77)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := dmverity.Verify(ctx, tg); err == nil || !strings.Contains(err.Error(), "veritysetup verify") {
			t.Errorf("salt %q: a changed block: %v, want veritysetup's refusal", salt, err)
		}
	}
}

// Bad parameters and names are refused before veritysetup runs.
func TestOpenRefusesBadInput(t *testing.T) {
	_, tg := image(t, 4, nil)
	for _, name := range []string{"", "a/b", "a b", "-x", ".", "..", "a\nb", strings.Repeat("n", 128)} {
		if _, err := dmverity.Open(context.Background(), tg, name); err == nil || !strings.Contains(err.Error(), "not a device-mapper name") {
			t.Errorf("name %q: %v", name, err)
		}
	}
	bad := tg
	bad.Params.HashOffset = 1
	if _, err := dmverity.Open(context.Background(), bad, "x"); !errors.Is(err, verity.ErrParams) {
		t.Errorf("a hash offset inside the data: %v, want ErrParams", err)
	}
}
