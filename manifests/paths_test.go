package manifests_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

const hexA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func TestValidPath(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"", false},
		{"/abs", false},
		{"/", false},
		{"a/../b", false},
		{"a//b", false},
		{"./a", false},
		{"a/.", false},
		{"a/", false},
		{"a\x00b", false},
		{"..", false},
		{".", false},
		{"../x", false},
		{"etc/x", true},
		{"etc", true},
		{"a/b/c.d", true},
		{"..a/b..", true},
	}
	for _, tt := range tests {
		err := manifests.ValidPath(tt.path)
		if tt.ok && err != nil {
			t.Errorf("ValidPath(%q) = %v, want nil", tt.path, err)
		}
		if !tt.ok && !errors.Is(err, manifests.ErrUnsafePath) {
			t.Errorf("ValidPath(%q) = %v, want ErrUnsafePath", tt.path, err)
		}
	}
}

func TestCheckLinkTarget(t *testing.T) {
	tests := []struct {
		path, target string
		ok           bool
	}{
		// A top-level link may not climb at all.
		{"link", "x", true},
		{"link", "../x", false},
		{"link", "./x", true},
		{"link", "..", false},
		// One directory deep: one ".." is the root, two escape.
		{"a/link", "../x", true},
		{"a/link", "..", true},
		{"a/link", "../../x", false},
		// Two deep.
		{"a/b/link", "../../x", true},
		{"a/b/link", "../../../x", false},
		{"a/b/link", "../../../../etc/passwd", false},
		// Descending first allows climbing back.
		{"link", "x/../y", true},
		{"link", "x/../../y", false},
		{"a/link", "b/c/../../../x", true},
		{"a/link", "b/c/../../../../x", false},
		// Absolute targets resolve against the tree's root.
		{"link", "/etc/passwd", true},
		{"a/b/link", "/../../x", true},
		// Empty and NUL targets.
		{"link", "", false},
		{"link", "a\x00b", false},
	}
	for _, tt := range tests {
		err := manifests.CheckLinkTarget(tt.path, tt.target)
		if tt.ok && err != nil {
			t.Errorf("CheckLinkTarget(%q, %q) = %v, want nil", tt.path, tt.target, err)
		}
		if !tt.ok && !errors.Is(err, manifests.ErrUnsafePath) {
			t.Errorf("CheckLinkTarget(%q, %q) = %v, want ErrUnsafePath", tt.path, tt.target, err)
		}
	}
}

func TestEntryValidate(t *testing.T) {
	tests := []struct {
		name string
		e    manifests.Entry
		ok   bool
	}{
		{"dir", manifests.Entry{Path: "etc", Type: manifests.TypeDir, Mode: 0755}, true},
		{"dir sticky", manifests.Entry{Path: "tmp", Type: manifests.TypeDir, Mode: 01777}, true},
		{"dir with size", manifests.Entry{Path: "etc", Type: manifests.TypeDir, Size: 1}, false},
		{"dir with hash", manifests.Entry{Path: "etc", Type: manifests.TypeDir, SHA256: hexA}, false},
		{"dir with target", manifests.Entry{Path: "etc", Type: manifests.TypeDir, Target: "x"}, false},
		{"file", manifests.Entry{Path: "etc/x", Type: manifests.TypeFile, Mode: 0644, Size: 3, SHA256: hexA}, true},
		{"empty file", manifests.Entry{Path: "etc/x", Type: manifests.TypeFile, Mode: 0644, SHA256: hexA}, true},
		{"setuid file", manifests.Entry{Path: "bin/su", Type: manifests.TypeFile, Mode: 04755, SHA256: hexA}, true},
		{"file without hash", manifests.Entry{Path: "etc/x", Type: manifests.TypeFile, Size: 3}, false},
		{"file short hash", manifests.Entry{Path: "etc/x", Type: manifests.TypeFile, SHA256: hexA[:63]}, false},
		{"file upper hash", manifests.Entry{Path: "etc/x", Type: manifests.TypeFile, SHA256: strings.ToUpper(hexA)}, false},
		{"file prefixed hash", manifests.Entry{Path: "etc/x", Type: manifests.TypeFile, SHA256: "sha256:" + hexA}, false},
		{"file negative size", manifests.Entry{Path: "etc/x", Type: manifests.TypeFile, Size: -1, SHA256: hexA}, false},
		{"file with target", manifests.Entry{Path: "etc/x", Type: manifests.TypeFile, SHA256: hexA, Target: "y"}, false},
		{"symlink", manifests.Entry{Path: "etc/l", Type: manifests.TypeSymlink, Mode: 0777, Target: "x"}, true},
		{"symlink absolute", manifests.Entry{Path: "etc/l", Type: manifests.TypeSymlink, Mode: 0777, Target: "/usr/x"}, true},
		{"symlink escaping", manifests.Entry{Path: "etc/l", Type: manifests.TypeSymlink, Target: "../../x"}, false},
		{"symlink empty target", manifests.Entry{Path: "etc/l", Type: manifests.TypeSymlink}, false},
		{"symlink with size", manifests.Entry{Path: "etc/l", Type: manifests.TypeSymlink, Target: "x", Size: 1}, false},
		{"symlink with hash", manifests.Entry{Path: "etc/l", Type: manifests.TypeSymlink, Target: "x", SHA256: hexA}, false},
		{"unknown type", manifests.Entry{Path: "dev/null", Type: "chardev"}, false},
		{"empty type", manifests.Entry{Path: "x"}, false},
		{"bad path", manifests.Entry{Path: "/etc", Type: manifests.TypeDir}, false},
		{"mode too big", manifests.Entry{Path: "etc", Type: manifests.TypeDir, Mode: 010000}, false},
		{"negative uid", manifests.Entry{Path: "etc", Type: manifests.TypeDir, UID: -1}, false},
		{"negative gid", manifests.Entry{Path: "etc", Type: manifests.TypeDir, GID: -1}, false},
	}
	for _, tt := range tests {
		err := tt.e.Validate()
		if tt.ok != (err == nil) {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestModeText(t *testing.T) {
	b, err := manifests.Mode(04755).MarshalText()
	if err != nil || string(b) != "4755" {
		t.Fatalf("MarshalText(04755) = %q, %v", b, err)
	}
	b, _ = manifests.Mode(0644).MarshalText()
	if string(b) != "0644" {
		t.Fatalf("MarshalText(0644) = %q, want 0644", b)
	}
	var m manifests.Mode
	if err := m.UnmarshalText([]byte("01777")); err != nil || m != 01777 {
		t.Fatalf("UnmarshalText(01777) = %o, %v", m, err)
	}
	for _, bad := range []string{"999", "10000", "-1", "", "rwx", "0x1ff"} {
		if err := m.UnmarshalText([]byte(bad)); !errors.Is(err, manifests.ErrInvalid) {
			t.Errorf("UnmarshalText(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestParentWithinNodeState(t *testing.T) {
	if got := manifests.Parent("a/b/c"); got != "a/b" {
		t.Errorf("Parent(a/b/c) = %q", got)
	}
	if got := manifests.Parent("a"); got != "" {
		t.Errorf("Parent(a) = %q", got)
	}
	within := []struct {
		p, dir string
		want   bool
	}{
		{"a/b", "a", true},
		{"a", "a", true},
		{"ab", "a", false},
		{"x", "", true},
		{"a", "a/b", false},
	}
	for _, tt := range within {
		if got := manifests.Within(tt.p, tt.dir); got != tt.want {
			t.Errorf("Within(%q, %q) = %v", tt.p, tt.dir, got)
		}
	}
	state := map[string]bool{
		"usr/lib/strata/image.json":  true,
		"var/lib/strata":             true,
		"var/lib/strata/ledger.json": true,
		"var/lib/stratax":            false,
		"var/lib":                    false,
		"usr/lib/strata/keys/a.pub":  false,
		"usr/lib/strata":             false,
	}
	for p, want := range state {
		if got := manifests.IsNodeState(p); got != want {
			t.Errorf("IsNodeState(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestDigest(t *testing.T) {
	d := manifests.Digest([]byte("abc"))
	if d != "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("Digest(abc) = %s", d)
	}
	if !manifests.ValidDigest(d) {
		t.Fatalf("ValidDigest(%s) = false", d)
	}
	for _, bad := range []string{"", hexA, "sha256:" + hexA[:63], "sha512:" + hexA, "sha256:" + strings.ToUpper(hexA)} {
		if manifests.ValidDigest(bad) {
			t.Errorf("ValidDigest(%q) = true", bad)
		}
	}
}
