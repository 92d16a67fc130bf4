package overlayfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/strata-dev/strata/internal/testenv"
	"golang.org/x/sys/unix"
)

// The mount(2) path for kernels before 6.8 stacks like the mount API does
// and leaves no staging mount behind.
func TestMountStackLegacy(t *testing.T) {
	testenv.RequireKernel(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for p, content := range map[string]string{filepath.Join(a, "x"): "top\n", filepath.Join(b, "x"): "bottom\n", filepath.Join(b, "y"): "y\n"} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := mountStackLegacy(filepath.Join(dir, "staging"), []string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for name, want := range map[string]string{"x": "top\n", "y": "y\n"} {
		got, err := os.ReadFile(filepath.Join("/proc/self/fd", itoa(fd), name))
		if err != nil || string(got) != want {
			t.Errorf("%s in the stack = %q, %v; want %q", name, got, err, want)
		}
	}
	ms, err := mounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if filepath.Dir(m.Point) == filepath.Join(dir, "staging") {
			t.Errorf("staging mount %s left behind", m.Point)
		}
	}
	if _, err := mountStackLegacy(filepath.Join(dir, "staging"), make([]string, 0)); err == nil {
		t.Error("an empty stack mounted")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// The probe for lowerdir+ agrees with the running kernel's version: 6.8
// and later have it; before 6.5 overlayfs parsed through the legacy
// parser, which the probe must see (the boot test's 6.1 guest needs it).
func TestHasLowerdirPlus(t *testing.T) {
	testenv.RequireKernel(t)
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil {
		t.Fatal(err)
	}
	got := hasLowerdirPlus()
	switch v := major*1000 + minor; {
	case v >= 6008 && !got:
		t.Errorf("kernel %d.%d has lowerdir+, the probe says not", major, minor)
	case v < 6005 && got:
		t.Errorf("kernel %d.%d parses overlayfs options through the legacy parser, the probe says lowerdir+", major, minor)
	}
}
