package layer_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/erofs"
	"github.com/strata-dev/strata/internal/layer"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

func dir(p string, mode manifests.Mode) manifests.Entry {
	return manifests.Entry{Path: p, Type: manifests.TypeDir, Mode: mode}
}

// overlay writes etc/app/app.conf and etc/new/x, deletes etc/motd and
// replaces the directory etc/old with a new one.
func overlay() (*manifests.OverlayManifest, tree.State, map[string]string) {
	files := map[string]string{"etc/app/app.conf": "port 81\n", "etc/new/x": "x\n"}
	m := &manifests.OverlayManifest{Line: "l", Version: "1.0.1", TreeDigest: "sha256:" + strings.Repeat("a", 64),
		Deletes: []string{"etc/motd", "etc/old"}}
	after := tree.State{"etc": dir("etc", 0o755), "etc/app": dir("etc/app", 0o750), "etc/new": dir("etc/new", 0o755), "etc/old": dir("etc/old", 0o700)}
	for _, p := range []string{"etc/app/app.conf", "etc/new/x"} {
		e := manifests.Entry{Path: p, Type: manifests.TypeFile, Mode: 0o644, Size: int64(len(files[p]))}
		m.Entries = append(m.Entries, e)
		after[p] = e
	}
	m.Entries = append(m.Entries, dir("etc/old", 0o700))
	return m, after, files
}

func payload(files map[string]string, m *manifests.OverlayManifest, reverse bool) layer.Payload {
	return func(ctx context.Context, fn func(manifests.Entry, io.Reader) error) error {
		es := slices.Clone(m.Entries)
		if reverse {
			slices.Reverse(es)
		}
		for _, e := range es {
			if err := fn(e, strings.NewReader(files[e.Path])); err != nil {
				return err
			}
		}
		return nil
	}
}

// The layer: parents with the modes of the tree after, a whiteout for
// the deleted file, the re-made directory opaque.
func TestNodes(t *testing.T) {
	m, after, _ := overlay()
	nodes, err := layer.Nodes(m, after)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]erofs.Node{}
	for _, n := range nodes {
		got[n.Path] = n
	}
	if n := got["etc/app"]; n.Type != erofs.Dir || n.Mode != 0o750 {
		t.Errorf("etc/app: %+v, want a directory 0750 as the tree after has it", n)
	}
	if n := got["etc/motd"]; n.Type != erofs.Whiteout {
		t.Errorf("etc/motd: %+v, want a whiteout", n)
	}
	if n := got["etc/old"]; n.Type != erofs.Dir || !n.Opaque {
		t.Errorf("etc/old: %+v, want an opaque directory", n)
	}
	if len(nodes) != 7 {
		t.Errorf("%d nodes, want 7: %+v", len(nodes), nodes)
	}
	delete(after, "etc/new")
	if _, err := layer.Nodes(m, after); !errors.Is(err, layer.ErrParent) {
		t.Errorf("a parent missing from the tree after: %v, want ErrParent", err)
	}
}

// The same overlay gives the same image and record whatever order its
// payload arrives in; another salt input (the version) changes them.
func TestWriteReproducible(t *testing.T) {
	m, after, files := overlay()
	write := func(m *manifests.OverlayManifest, reverse bool) (*manifests.LayerImage, []byte) {
		t.Helper()
		f, err := os.Create(filepath.Join(t.TempDir(), "l.erofs"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		li, err := layer.Write(context.Background(), f, m, after, payload(files, m, reverse))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		return li, raw
	}
	a, rawA := write(m, false)
	b, rawB := write(m, true)
	if *a != *b || string(rawA) != string(rawB) {
		t.Fatalf("the payload's order changed the image: %+v, %+v", a, b)
	}
	if err := a.Validate(); err != nil || a.Size != int64(len(rawA)) || a.DataBlocks*manifests.VerityBlockSize >= a.Size {
		t.Fatalf("record %+v of %d bytes: %v", a, len(rawA), err)
	}
	if sum := sha256.Sum256(rawA); a.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("record's sha256 %s, the image's %x", a.SHA256, sum)
	}
	m2 := *m
	m2.Version = "1.0.2"
	if c, _ := write(&m2, false); c.Salt == a.Salt || c.RootHash == a.RootHash {
		t.Errorf("another version, the same salt %s or root hash %s", c.Salt, c.RootHash)
	}
	// A payload without a file's content is refused.
	short := func(ctx context.Context, fn func(manifests.Entry, io.Reader) error) error { return nil }
	f, err := os.Create(filepath.Join(t.TempDir(), "s.erofs"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := layer.Write(context.Background(), f, m, after, short); !errors.Is(err, manifests.ErrInvalid) {
		t.Errorf("a payload with no contents: %v, want ErrInvalid", err)
	}
}
