//go:build debian

package builder_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/manifests"
)

// debianRecipe is the Debian node recipe, relative to this package.
const debianRecipe = "../images/debian-node/recipe.yaml"

// TestDebianNodeReproducible builds images/debian-node twice with the same
// cache and compares the squashfs files. The first run on a machine needs
// root and network (debootstrap, apt-get) and takes minutes; the cache
// ($STRATA_TEST_CACHE, default /var/cache/strata-test) makes later runs
// quick and offline. Run it with `make test-debian`.
func TestDebianNodeReproducible(t *testing.T) {
	requireTools(t)
	if os.Geteuid() != 0 {
		t.Fatal("debootstrap and run steps need root: run the tests as root")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Fatalf("debootstrap is required (make deps installs it): %v", err)
	}
	cache := os.Getenv("STRATA_TEST_CACHE")
	if cache == "" {
		cache = "/var/cache/strata-test"
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "strata")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/strata").CombinedOutput(); err != nil {
		t.Fatalf("building strata: %v\n%s", err, out)
	}
	key := testKey(t)
	build := func(out string) *builder.Result {
		t.Helper()
		lines := 0
		start := time.Now()
		res, err := builder.Build(context.Background(), debianRecipe, out, builder.WithKey(key), builder.WithCacheDir(cache),
			builder.WithStrataBinary(bin), builder.WithProgress(func(s string) {
				lines++
				if !strings.HasPrefix(s, "debootstrap: ") && !strings.HasPrefix(s, "run: ") {
					t.Log(s)
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("build into %s: %s, %d progress lines", out, time.Since(start).Round(time.Second), lines)
		return res
	}
	a := build(filepath.Join(dir, "a"))
	b := build(filepath.Join(dir, "b"))
	ha, hb := fileSHA256(t, a.Image), fileSHA256(t, b.Image)
	t.Logf("sha256 %s\nsha256 %s", ha, hb)
	if ha != hb {
		t.Fatal("two builds of images/debian-node with the same cache give different squashfs files")
	}

	m := a.ManifestData
	cat := m.Catalog
	if s := findService(cat, "nginx.service"); s == nil || !slices.Contains(s.ReloadPaths, "etc/nginx") || !slices.Contains(s.Binaries, "usr/sbin/nginx") {
		t.Errorf("catalog nginx.service = %+v, want reload path etc/nginx and binary usr/sbin/nginx", s)
	}
	if s := findService(cat, "rsyslog.service"); s == nil || !slices.Contains(s.Paths, "etc/rsyslog.conf") {
		t.Errorf("catalog rsyslog.service = %+v, want restart path etc/rsyslog.conf", s)
	}
	if s := findService(cat, "strata-verify.service"); s == nil || !slices.Contains(s.Binaries, "usr/bin/strata") {
		t.Errorf("catalog strata-verify.service = %+v", s)
	}
	files := map[string]manifests.Entry{}
	for _, e := range m.Files {
		files[e.Path] = e
		switch {
		case strings.HasPrefix(e.Path, "dev/"), strings.HasPrefix(e.Path, "etc/ssh/ssh_host_"),
			strings.HasPrefix(e.Path, "var/lib/apt/lists/") && e.Type == manifests.TypeFile,
			strings.HasPrefix(e.Path, "var/log/") && e.Size > 0:
			t.Errorf("%s is in the image", e.Path)
		}
	}
	for _, p := range []string{"usr/sbin/policy-rc.d", "var/lib/systemd/random-seed"} {
		if _, ok := files[p]; ok {
			t.Errorf("%s is in the image", p)
		}
	}
	if e := files["etc/machine-id"]; e.Type != manifests.TypeFile || e.Size != 0 {
		t.Errorf("etc/machine-id = %+v, want an empty file", e)
	}
	for _, p := range []string{"usr/bin/strata", "usr/sbin/nginx", "usr/sbin/rsyslogd", "lib/systemd/systemd", "usr/bin/dbus-daemon",
		"etc/systemd/system/multi-user.target.wants/nginx.service", "etc/systemd/system/multi-user.target.wants/rsyslog.service"} {
		if _, ok := files[p]; !ok {
			// lib is a symlink in a merged-/usr tree: look below usr.
			if _, ok := files["usr/"+p]; !ok {
				t.Errorf("%s is not in the image", p)
			}
		}
	}
}

func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
