package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/sign"
)

// Squashfs are the tools building, provisioning and regenerating images
// in the squashfs form run (make deps installs them; package disktest
// lists the disk tools).
var Squashfs = []string{"mksquashfs", "unsquashfs", "sqfs2tar", "rdsquashfs"}

// RequireKernel is for a test that mounts filesystems, makes loop devices
// or namespaces, or runs systemd: it fails unless the test runs as root,
// and under -short (make unit) skips, as RequireTools does.
func RequireKernel(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs root and kernel mounts: not a unit test (make test runs it)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (kernel mounts); make test runs as root")
	}
}

// RequireRoot is for a test that needs the real root: device nodes, files
// owned by other users, the sandbox (its namespaces and control groups).
// make unit run by another user runs as root of a user namespace of its
// own (its uid mapped to 0), where such tests are skipped; anywhere else
// a test that is not the real root fails.
func RequireRoot(t testing.TB) {
	t.Helper()
	if RealRoot() {
		return
	}
	if testing.Short() {
		t.Skip("needs the real root (devices, other owners, the sandbox): make test runs it")
	}
	t.Fatal("this test needs root; make test runs as root")
}

// RealRoot reports whether the process is root of the initial user
// namespace (uid 0, every uid mapped to itself), not root of a user
// namespace that maps one uid.
func RealRoot() bool {
	if os.Geteuid() != 0 {
		return false
	}
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	return strings.Join(strings.Fields(string(b)), " ") == "0 0 4294967295"
}

// RequireTools fails the test, naming what is missing, unless every tool
// of every group is on PATH (or, for a path, exists): a missing tool is
// a missing install step, never a reason to skip. Under -short (make
// unit, which proves the core with no external tool) the test is skipped
// instead, whether the tools are there or not: `make test` runs it.
func RequireTools(t testing.TB, groups ...[]string) {
	t.Helper()
	if testing.Short() {
		var all []string
		for _, g := range groups {
			all = append(all, g...)
		}
		t.Skipf("needs %s: not a unit test (make test runs it)", strings.Join(all, ", "))
	}
	var missing []string
	for _, g := range groups {
		for _, tool := range g {
			if strings.Contains(tool, "/") {
				if _, err := os.Stat(tool); err != nil {
					missing = append(missing, tool)
				}
			} else if _, err := exec.LookPath(tool); err != nil {
				missing = append(missing, tool)
			}
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%s required (run make deps)", strings.Join(missing, ", "))
	}
}

// Key returns a new signing key, its files (NAME.key, NAME.pub) in a
// temporary directory of the test.
func Key(t testing.TB) *sign.Key {
	t.Helper()
	k, _ := KeyIn(t, t.TempDir(), "k")
	return k
}

// KeyIn generates a key pair as dir/NAME.key and dir/NAME.pub and returns
// the key and the .pub file's bytes.
func KeyIn(t testing.TB, dir, name string) (*sign.Key, []byte) {
	t.Helper()
	prefix := filepath.Join(dir, name)
	if err := sign.Generate(prefix); err != nil {
		t.Fatal(err)
	}
	k, err := sign.LoadKey(prefix + ".key")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(prefix + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return k, pub
}

// StartLogged starts cmd, a server a test needs, with its output in
// dir/log; it is killed when the test ends, and a failed test shows its
// log under name.
func StartLogged(t testing.TB, name, dir string, cmd *exec.Cmd) {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Logf("%s log:\n%s", name, b)
		}
	})
}
