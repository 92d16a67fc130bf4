package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// On a sealed node (nodestate.Sealed) content is not compared, since no
// hand edit can reach it, but everything stat tells still is; a path on
// a mount other than the sealed ones is changed, whatever it holds. An
// unsealed node compares content too.
func TestLocalEditsSealed(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string, mode os.FileMode) manifests.Entry {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(content))
		return manifests.Entry{Path: rel, Type: manifests.TypeFile, Mode: manifests.Mode(mode), UID: os.Getuid(), GID: os.Getgid(), Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:])}
	}
	before := tree.State{}
	for _, e := range []manifests.Entry{
		write("etc/same", "same\n", 0o644),
		write("etc/content", "abcd\n", 0o644),
		write("etc/size", "abcd\n", 0o644),
		write("etc/mode", "abcd\n", 0o644),
	} {
		before[e.Path] = e
	}
	write("etc/content", "abXd\n", 0o644) // the same size
	write("etc/size", "abcde\n", 0o644)
	write("etc/mode", "abcd\n", 0o600)
	write("etc/new", "not in the head\n", 0o644)
	var todo []*archive.Archive
	for _, p := range []string{"etc/same", "etc/content", "etc/size", "etc/mode", "etc/new"} {
		todo = append(todo, &archive.Archive{Manifest: &manifests.OverlayManifest{Entries: []manifests.Entry{{Path: p, Type: manifests.TypeFile}}}})
	}
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, root, 0, unix.STATX_MNT_ID, &stx); err != nil || stx.Mask&unix.STATX_MNT_ID == 0 {
		t.Fatalf("statx of %s gives no mount id: %v", root, err)
	}
	all := []string{"etc/content", "etc/mode", "etc/new", "etc/same", "etc/size"}
	for _, c := range []struct {
		name          string
		sealed        map[uint64]bool
		want, covered []string
	}{
		{"unsealed", nil, []string{"etc/content", "etc/mode", "etc/new", "etc/size"}, nil},
		{"sealed", map[uint64]bool{stx.Mnt_id: true}, []string{"etc/mode", "etc/new", "etc/size"}, nil},
		{"on another mount", map[uint64]bool{stx.Mnt_id + 1: true}, all, all},
	} {
		got, covered, err := localEdits(context.Background(), root, before, todo, c.sealed)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !slices.Equal(got, c.want) || !slices.Equal(covered, c.covered) {
			t.Errorf("%s: local edits %v (covered %v), want %v (covered %v)", c.name, got, covered, c.want, c.covered)
		}
	}

	// The refusal names the cause: edited files are put back, covered
	// ones unmounted.
	err := refuseLocalEdits(root, []string{"etc/a", "etc/b"}, []string{"etc/b"})
	if !errors.Is(err, ErrLocalEdit) || !strings.Contains(err.Error(), "/etc/a changed on the node") || !strings.Contains(err.Error(), "/etc/b covered by a mount on the node") ||
		strings.Contains(err.Error(), "/etc/b changed") {
		t.Errorf("refusal: %v", err)
	}
}
