package repo_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/ctxio/ctxiotest"
	"github.com/strata-dev/strata/internal/registrytest"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/overlay"
)

// A repository pushed to a real registry reads back member for member,
// verifies as the directory does, and polls by resolving its tag.
func TestOCIPushAndRead(t *testing.T) {
	ctx := context.Background()
	addr := registrytest.Start(t)
	img, key, pub := image(t, "alpha")
	dir := filepath.Join(t.TempDir(), "repo")
	if _, err := repo.Init(context.Background(), dir, img, key); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.AddImage(ctx, dir, imageAt(t, "alpha", "1.1.0", key), key); err != nil {
		t.Fatal(err)
	}
	ref := "oci://" + addr + "/strata/alpha:stable"
	if _, err := repo.Push(ctx, dir, ref, nil); err != nil {
		t.Fatal(err)
	}
	st, err := repo.Locate(ref)
	if err != nil {
		t.Fatal(err)
	}
	trust, err := sign.LoadPublicFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	r, err := repo.OpenStore(ctx, st, trust)
	if err != nil {
		t.Fatalf("opening the pushed repository: %v", err)
	}
	if _, err := repo.LoadChain(ctx, r, "", "", nil); err != nil {
		t.Fatalf("loading its chain: %v", err)
	}
	for _, name := range []string{repo.IndexFile, r.Index.Lines[0].Image.File} {
		want, _ := os.ReadFile(filepath.Join(dir, name))
		got, err := repo.ReadMember(ctx, st, name, 1<<30)
		if err != nil || string(got) != string(want) {
			t.Errorf("%s: %d bytes, %v; want the directory's %d", name, len(got), err, len(want))
		}
	}
	// The line's upgrade image travels with it, checked as it is fetched.
	if len(r.Index.Lines[0].Upgrades) != 1 {
		t.Fatalf("upgrade images: %+v", r.Index.Lines[0].Upgrades)
	}
	up := r.Index.Lines[0].Upgrades[0]
	got, err := repo.FetchImageRef(ctx, r, up, t.TempDir())
	if err != nil {
		t.Fatalf("fetching the upgrade image: %v", err)
	}
	im, err := repo.LoadImage(got, trust)
	if err != nil || im.Manifest.Version != "1.1.0" {
		t.Fatalf("the fetched upgrade image: %v", err)
	}
	// Its verity record travelled too, and the image verifies against it.
	if v, err := repo.LoadVerity(got, im, trust); err != nil {
		t.Fatalf("the fetched upgrade image's verity record: %v", err)
	} else if err := repo.VerifyTree(ctx, got, v); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Open(ctx, "overlays/none.overlay.tar.zst"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a member the artifact lacks: %v, want not exist", err)
	}
	if _, _, err := st.Open(ctx, "../x"); !errors.Is(err, manifests.ErrUnsafePath) {
		t.Errorf("an unsafe name: %v", err)
	}
	p := st.(repo.Poller)
	if changed, err := p.Poll(ctx); err != nil || !changed {
		t.Fatalf("first poll: %v %v", changed, err)
	}
	if changed, err := p.Poll(ctx); err != nil || changed {
		t.Fatalf("unchanged poll: %v %v", changed, err)
	}
	src := filepath.Join(t.TempDir(), "y")
	if err := os.WriteFile(src, []byte("y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := overlay.Create(ctx, dir, key, overlay.Change{Adds: []overlay.Add{{Dest: "/etc/y", Src: src}}}, overlay.CreateOptions{Version: "1.0.1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Push(ctx, dir, ref, nil); err != nil {
		t.Fatal(err)
	}
	if changed, err := p.Poll(ctx); err != nil || !changed {
		t.Fatalf("poll after a push: %v %v", changed, err)
	}
	rc, size, err := st.Open(ctx, "overlays/alpha-1.0.1.overlay.tar.zst")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || int64(len(b)) != size {
		t.Fatalf("reading the new overlay: %d of %d bytes, %v", len(b), size, err)
	}
	if _, err := repo.Locate("oci://" + addr + "/Strata/UPPER"); !errors.Is(err, repo.ErrLocation) {
		t.Errorf("an invalid repository name: %v, want ErrLocation", err)
	}
}

// repo push sends only what the index vouches for: a member that became a
// symlink (to a secret, say) or changed is refused, and nothing is tagged.
func TestOCIPushRefusesUnverifiedMembers(t *testing.T) {
	ctx := context.Background()
	addr := registrytest.Start(t)
	img, key, _ := image(t, "alpha")
	dir := filepath.Join(t.TempDir(), "repo")
	r, err := repo.Init(context.Background(), dir, img, key)
	if err != nil {
		t.Fatal(err)
	}
	member := r.Path(r.Index.Lines[0].Image.File)
	secret := filepath.Join(t.TempDir(), "signing.key")
	if err := os.WriteFile(secret, []byte("SECRET KEY MATERIAL"), 0o600); err != nil {
		t.Fatal(err)
	}
	saved, _ := os.ReadFile(member)
	ref := "oci://" + addr + "/strata/alpha"
	for name, plant := range map[string]func(){
		"symlink": func() { os.Remove(member); _ = os.Symlink(secret, member) },
		"changed": func() {
			os.Remove(member)
			_ = os.WriteFile(member, append(saved[:len(saved)-1:len(saved)-1], 'x'), 0o644)
		},
	} {
		plant()
		_, err := repo.Push(ctx, dir, ref, nil)
		if !errors.Is(err, manifests.ErrRejected) {
			t.Errorf("push with a %s image: %v, want a rejection", name, err)
		}
		st, _ := repo.Locate(ref)
		if _, err := st.(repo.Poller).Poll(ctx); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after a refused push (%s) the tag exists: %v", name, err)
		}
	}
}

// A push interrupted at any step (the context cancelled as each pushed
// member is reported, one push per step) stops with the cancellation and
// leaves the tag where it was: readers keep the last complete push. The
// next push completes.
func TestOCIPushInterrupted(t *testing.T) {
	ctx := context.Background()
	addr := registrytest.Start(t)
	img, key, pub := image(t, "alpha")
	dir := filepath.Join(t.TempDir(), "repo")
	if _, err := repo.Init(context.Background(), dir, img, key); err != nil {
		t.Fatal(err)
	}
	ref := "oci://" + addr + "/strata/alpha:stable"
	if _, err := repo.Push(ctx, dir, ref, nil); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "y")
	if err := os.WriteFile(src, []byte("y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := overlay.Create(ctx, dir, key, overlay.Change{Adds: []overlay.Add{{Dest: "/etc/y", Src: src}}}, overlay.CreateOptions{Version: "1.0.1"}); err != nil {
		t.Fatal(err)
	}
	trust, err := sign.LoadPublicFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	head := func() string {
		t.Helper()
		st, err := repo.Locate(ref)
		if err != nil {
			t.Fatal(err)
		}
		r, err := repo.OpenStore(ctx, st, trust)
		if err != nil {
			t.Fatalf("opening the pushed repository: %v", err)
		}
		c, err := repo.LoadChain(ctx, r, "", "", nil)
		if err != nil {
			t.Fatalf("loading its chain: %v", err)
		}
		return c.Head().Version
	}
	op := func(ctx context.Context, progress func(string)) error {
		_, err := repo.Push(ctx, dir, ref, progress)
		return err
	}
	ctxiotest.EveryStep(t, op, func(at string, stopped bool) {
		if h := head(); stopped && h != "1.0.0" {
			t.Fatalf("cancelled at %q: the tag moved to head %s", at, h)
		} else if !stopped && !strings.HasPrefix(at, "tagged") {
			t.Fatalf("cancelled at %q: the push went on to the end", at)
		}
	})
	if h := head(); h != "1.0.1" {
		t.Errorf("after a complete push: head %s, want 1.0.1", h)
	}
}
