package testnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/sign"
)

// Image is a built image and what was used to build it.
type Image struct {
	Squashfs string // the image file
	Manifest string // its signed manifest (.image.json, with .minisig)
	Key      string // the signing key file (strata key generate's .key)
	Pub      string // its public key file
	Strata   string // the strata binary baked in as /usr/bin/strata
}

var shared struct {
	once sync.Once
	dir  string
	img  *Image
	err  error
}

// DefaultCache is the build cache used unless $STRATA_TEST_CACHE says
// otherwise (the same one builder's Debian test uses).
const DefaultCache = "/var/cache/strata-test"

// DebianImage builds images/debian-node once per test binary (later calls
// return the same Image) with a fresh signing key and the strata binary
// of this checkout, using the cache $STRATA_TEST_CACHE (default
// DefaultCache): the first build on a machine needs root, network and
// minutes, later ones about half a minute. The files live until Main's
// m.Run returns.
func DebianImage(t testing.TB) (*Image, error) {
	shared.once.Do(func() {
		start := time.Now()
		shared.img, shared.err = buildDebian(context.Background(), t)
		if shared.err == nil {
			t.Logf("built %s in %v", shared.img.Squashfs, time.Since(start).Round(time.Second))
		}
	})
	return shared.img, shared.err
}

func buildDebian(ctx context.Context, t testing.TB) (*Image, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return nil, fmt.Errorf("testnode: building the Debian image: go env GOMOD: %w", err)
	}
	top := filepath.Dir(strings.TrimSpace(string(gomod)))
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-image-", WorkPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("testnode: building the Debian image: %w", err)
	}
	shared.dir = dir
	img := &Image{Strata: filepath.Join(dir, "strata"), Key: filepath.Join(dir, "site.key"), Pub: filepath.Join(dir, "site.pub")}
	build := exec.CommandContext(ctx, "go", "build", "-o", img.Strata, "./cmd/strata")
	build.Dir = top
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("testnode: building strata in %s: %w\n%s", top, err, out)
	}
	if err := sign.Generate(filepath.Join(dir, "site")); err != nil {
		return nil, fmt.Errorf("testnode: generating a key in %s: %w", dir, err)
	}
	key, err := sign.LoadKey(img.Key)
	if err != nil {
		return nil, fmt.Errorf("testnode: loading key %s: %w", img.Key, err)
	}
	cache := os.Getenv("STRATA_TEST_CACHE")
	if cache == "" {
		cache = DefaultCache
	}
	recipe := filepath.Join(top, "images/debian-node/recipe.yaml")
	res, err := builder.Build(ctx, recipe, filepath.Join(dir, "images"), builder.WithKey(key), builder.WithCacheDir(cache),
		builder.WithStrataBinary(img.Strata), builder.WithProgress(func(s string) {
			if !strings.HasPrefix(s, "debootstrap: ") && !strings.HasPrefix(s, "run: ") && !strings.HasPrefix(s, "writing image: ") {
				t.Log(s)
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("testnode: building %s: %w", recipe, err)
	}
	img.Squashfs, img.Manifest = res.Image, res.Manifest
	return img, nil
}

// Main is a TestMain for packages that start nodes: it calls MaybeLaunch,
// runs the tests and removes the image DebianImage built.
//
//	func TestMain(m *testing.M) { testnode.Main(m) }
func Main(m *testing.M) {
	MaybeLaunch()
	code := m.Run()
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}
