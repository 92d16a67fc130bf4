package builder

import (
	"os"
	"path/filepath"
	"testing"
)

// A tree whose etc and usr/sbin are links to host directories (an
// earlier run step can make them so): preparing it for a run step writes
// neither policy-rc.d nor resolv.conf through them, and undoing it
// touches nothing there either.
func TestPrepareTreeThroughLinks(t *testing.T) {
	root := t.TempDir()
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "resolv.conf"), []byte("host's own\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "usr"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"etc", "usr/sbin"} {
		if err := os.Symlink(host, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	restore, err := prepareTree(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(host, "resolv.conf")); string(b) != "host's own\n" {
		t.Errorf("the host's resolv.conf became %q", b)
	}
	if _, err := os.Lstat(filepath.Join(host, "policy-rc.d")); !os.IsNotExist(err) {
		t.Errorf("policy-rc.d was written through the link: %v", err)
	}

	// A real tree: both are put in and taken back out.
	real := t.TempDir()
	for _, d := range []string{"etc", "usr/sbin"} {
		if err := os.MkdirAll(filepath.Join(real, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(real, "etc/resolv.conf"), []byte("tree's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	restore, err = prepareTree(real)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(real, "usr/sbin/policy-rc.d")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("policy-rc.d during the step: %v %v", fi, err)
	}
	if host, _ := os.ReadFile("/etc/resolv.conf"); len(host) > 0 {
		if b, _ := os.ReadFile(filepath.Join(real, "etc/resolv.conf")); string(b) != string(host) {
			t.Errorf("resolv.conf during the step = %q, want the host's", b)
		}
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(real, "etc/resolv.conf")); string(b) != "tree's\n" {
		t.Errorf("resolv.conf after = %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(real, "etc/resolv.conf")); fi.Mode().Perm() != 0o600 {
		t.Errorf("resolv.conf mode after = %v, want 0600 kept", fi.Mode())
	}
	if _, err := os.Lstat(filepath.Join(real, "usr/sbin/policy-rc.d")); !os.IsNotExist(err) {
		t.Errorf("policy-rc.d after: %v", err)
	}
}
