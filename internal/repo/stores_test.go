package repo_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/strata-dev/strata/internal/registrytest"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/repo/storetest"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
)

// rebuiltBundle is a bundle store the fixture can place members in: each
// placement writes the bundle anew (an uncompressed tar with its info
// member) and reopens it, so every read goes through repo.OpenBundle.
type rebuiltBundle struct {
	t     *testing.T
	path  string
	mu    sync.Mutex
	files map[string][]byte
	cur   *repo.BundleStore
}

func (b *rebuiltBundle) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	b.mu.Lock()
	cur := b.cur
	b.mu.Unlock()
	return cur.Open(ctx, name)
}

func (b *rebuiltBundle) place(name string, data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.files[name] = data
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(b.files))
	for n := range b.files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(b.files[n])), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(b.files[n]); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(b.path, buf.Bytes(), 0o644); err != nil {
		return err
	}
	next, err := repo.OpenBundle(context.Background(), b.path)
	if err != nil {
		return err
	}
	if b.cur != nil {
		b.cur.Close()
	}
	b.cur = next
	return nil
}

// The store suite on a bundle: members placed into the tar.
func TestBundleStoreSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Fixture {
		info, _ := json.Marshal(repo.BundleInfo{Line: "demo", From: "1.0.0", To: "1.0.1"})
		b := &rebuiltBundle{t: t, path: filepath.Join(t.TempDir(), "b.tar"), files: map[string][]byte{}}
		if err := b.place(repo.BundleInfoFile, info); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.cur.Close() })
		return &storetest.Fixture{Store: b, File: b.place}
	})
}

// The store suite on a spool over a directory: members placed in the
// directory are fetched into the spool at their first read.
func TestSpoolStoreSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Fixture {
		dir := t.TempDir()
		sp, err := repo.NewSpool(struct{ repo.Store }{repo.Dir(dir)}, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sp.Close() })
		return &storetest.Fixture{Store: sp, File: func(name string, data []byte) error {
			p := filepath.Join(dir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			return os.WriteFile(p, data, 0o644)
		}}
	})
}

// The store suite on a real registry: each placement pushes the
// repository's artifact anew (every member a layer titled with its name)
// and moves the tag, as strata repo push does.
func TestOCIStoreSuite(t *testing.T) {
	addr := registrytest.Start(t)
	n := 0
	storetest.Run(t, func(t *testing.T) *storetest.Fixture {
		n++
		ref := fmt.Sprintf("oci://%s/strata/suite%d:stable", addr, n)
		st, err := repo.Locate(ref)
		if err != nil {
			t.Fatal(err)
		}
		target, err := remote.NewRepository(fmt.Sprintf("%s/strata/suite%d", addr, n))
		if err != nil {
			t.Fatal(err)
		}
		target.PlainHTTP = true
		files := map[string][]byte{}
		return &storetest.Fixture{Store: st, File: func(name string, data []byte) error {
			ctx := context.Background()
			files[name] = data
			var layers []ocispec.Descriptor
			for member, content := range files {
				d := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromBytes(content), Size: int64(len(content)),
					Annotations: map[string]string{ocispec.AnnotationTitle: member}}
				if err := target.Push(ctx, d, bytes.NewReader(content)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
					return err
				}
				layers = append(layers, d)
			}
			sort.Slice(layers, func(i, j int) bool {
				return layers[i].Annotations[ocispec.AnnotationTitle] < layers[j].Annotations[ocispec.AnnotationTitle]
			})
			desc, err := oras.PackManifest(ctx, target, oras.PackManifestVersion1_0, repo.ArtifactType, oras.PackManifestOptions{Layers: layers})
			if err != nil {
				return err
			}
			if err := target.Tag(ctx, desc, "stable"); err != nil {
				return err
			}
			// A reader sees a new artifact when it polls (members are
			// read from the artifact it last resolved).
			_, err = st.(repo.Poller).Poll(ctx)
			return err
		}}
	})
}

// The store suite on the in-memory store: members placed with Put, which
// refuses a member where a directory of others is, and below a member.
func TestMemStoreSuite(t *testing.T) {
	m := repo.Mem()
	ctx := context.Background()
	if err := m.Put(ctx, "overlays/a", bytes.NewReader([]byte("a"))); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"overlays", "overlays/a/b"} {
		if err := m.Put(ctx, name, bytes.NewReader(nil)); !errors.Is(err, repo.ErrNotRegular) {
			t.Errorf("put %s: %v, want ErrNotRegular", name, err)
		}
	}
	storetest.Run(t, func(t *testing.T) *storetest.Fixture {
		m := repo.Mem()
		return &storetest.Fixture{Store: m, File: func(name string, data []byte) error {
			return m.Put(context.Background(), name, bytes.NewReader(data))
		}}
	})
}
