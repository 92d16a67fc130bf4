package manifests_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

// testPub returns a minisign public key in one-line form whose id is id
// (little-endian in the key, as minisign stores it).
func testPub(id byte) string {
	b := make([]byte, 42)
	b[0], b[1], b[2] = 'E', 'd', id
	for i := 10; i < 42; i++ {
		b[i] = id
	}
	return base64.StdEncoding.EncodeToString(b)
}

func keyEntry(t testing.TB, pub string) manifests.Entry {
	t.Helper()
	id, err := manifests.KeyID(pub)
	if err != nil {
		t.Fatal(err)
	}
	text, err := manifests.KeyFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(text)
	return manifests.Entry{Path: manifests.KeyPath(id), Type: manifests.TypeFile, Mode: 0o644, Size: int64(len(text)), SHA256: hex.EncodeToString(sum[:])}
}

// validRotation adds key 2 and revokes key 1.
func validRotation(t testing.TB) *manifests.OverlayManifest {
	m := validOverlay()
	m.Entries = []manifests.Entry{keyEntry(t, testPub(2))}
	m.Deletes = []string{manifests.KeyPath("0000000000000001")}
	m.Services = []manifests.ServiceAction{}
	m.Keys = &manifests.Rotation{Add: []string{testPub(2)}, Revoke: []string{"0000000000000001"}}
	return m
}

func TestKeyIDAndFile(t *testing.T) {
	id, err := manifests.KeyID(testPub(0xab))
	if err != nil || id != "00000000000000AB" {
		t.Fatalf("KeyID = %q, %v; want 00000000000000AB", id, err)
	}
	text, _ := manifests.KeyFile(testPub(0xab))
	if want := "untrusted comment: minisign public key: AB\n" + testPub(0xab) + "\n"; string(text) != want {
		t.Errorf("KeyFile = %q, want %q", text, want)
	}
	for _, bad := range []string{"", "RWQ", testPub(1) + "=", strings.Replace(testPub(1), "RW", "RX", 1), base64.StdEncoding.EncodeToString(make([]byte, 42))} {
		if _, err := manifests.KeyID(bad); !errors.Is(err, manifests.ErrInvalid) {
			t.Errorf("KeyID(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestRotationValidate(t *testing.T) {
	if err := validRotation(t).Validate(); err != nil {
		t.Fatalf("valid rotation: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(m *manifests.OverlayManifest)
		says   string
	}{
		{"empty", func(m *manifests.OverlayManifest) {
			m.Keys = &manifests.Rotation{}
			m.Entries, m.Deletes = []manifests.Entry{keyEntry(t, testPub(2))}, nil
		}, "adds and revokes no key"},
		{"other content too", func(m *manifests.OverlayManifest) {
			m.Entries = append([]manifests.Entry{{Path: "etc/motd", Type: manifests.TypeFile, Mode: 0o644, Size: 1, SHA256: hexA}}, m.Entries...)
		}, "exactly the 1 key files"},
		{"setuid key file", func(m *manifests.OverlayManifest) { m.Entries[0].Mode = 0o4755 }, "not the key file"},
		{"key file owned by a user", func(m *manifests.OverlayManifest) { m.Entries[0].UID = 1000 }, "not the key file"},
		{"other key's content", func(m *manifests.OverlayManifest) { m.Entries[0].SHA256 = keyEntry(t, testPub(3)).SHA256 }, "not the key file"},
		{"key file under another name", func(m *manifests.OverlayManifest) { m.Entries[0].Path = manifests.KeyPath("0000000000000003") }, "not the key file"},
		{"key file a symlink", func(m *manifests.OverlayManifest) {
			m.Entries[0] = manifests.Entry{Path: m.Entries[0].Path, Type: manifests.TypeSymlink, Mode: 0o777, Target: "/etc/shadow"}
		}, "not the key file"},
		{"revoke without delete", func(m *manifests.OverlayManifest) { m.Deletes = nil }, "delete exactly"},
		{"delete without revoke", func(m *manifests.OverlayManifest) { m.Keys.Revoke = []string{} }, "delete exactly"},
		{"delete outside the keys", func(m *manifests.OverlayManifest) { m.Deletes = []string{"etc/shadow"} }, "delete exactly"},
		{"revoke twice", func(m *manifests.OverlayManifest) {
			m.Keys.Revoke = []string{"0000000000000001", "0000000000000001"}
		}, "twice"},
		{"add twice", func(m *manifests.OverlayManifest) { m.Keys.Add = append(m.Keys.Add, testPub(2)) }, "twice"},
		{"add and revoke", func(m *manifests.OverlayManifest) {
			m.Keys.Revoke = []string{"0000000000000002"}
			m.Deletes = []string{manifests.KeyPath("0000000000000002")}
		}, "also changed"},
		{"revoked id a path", func(m *manifests.OverlayManifest) { m.Keys.Revoke = []string{"../../../etc/x"} }, "16 upper-case hex"},
		{"revoked id lower case", func(m *manifests.OverlayManifest) { m.Keys.Revoke = []string{"000000000000000a"} }, "16 upper-case hex"},
		{"added key not a key", func(m *manifests.OverlayManifest) { m.Keys.Add = []string{"$(reboot)"} }, "not a minisign public key"},
		{"restarts", func(m *manifests.OverlayManifest) {
			m.Services = []manifests.ServiceAction{sa("demo-web.service", manifests.ActionRestart, false, "etc/x")}
		}, "keys only"},
		{"too many keys", func(m *manifests.OverlayManifest) {
			for i := 0; i < 70; i++ {
				m.Keys.Revoke = append(m.Keys.Revoke, "0000000000000001")
			}
		}, "more than 64"},
	}
	for _, tt := range tests {
		m := validRotation(t)
		tt.mutate(m)
		err := m.Validate()
		if !errors.Is(err, manifests.ErrInvalid) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: Validate() = %v, want ErrInvalid saying %q", tt.name, err, tt.says)
		}
	}
	// Without a rotation, key files are never tree content.
	m := validRotation(t)
	m.Keys = nil
	if err := m.Validate(); !errors.Is(err, manifests.ErrUnsafePath) {
		t.Errorf("key files without a rotation: %v, want ErrUnsafePath", err)
	}
}

// An image's key files are exactly the keys it lists.
func TestImageKeyFiles(t *testing.T) {
	withKeys := func(keys []string, files ...manifests.Entry) *manifests.ImageManifest {
		m := validImage()
		dirs := []manifests.Entry{}
		for _, d := range []string{"usr/lib", "usr/lib/strata", manifests.KeysDir} {
			dirs = append(dirs, manifests.Entry{Path: d, Type: manifests.TypeDir, Mode: 0o755})
		}
		m.Files = sortEntries(append(append(m.Files, dirs...), files...))
		m.Keys = keys
		m.TreeDigest = manifests.TreeDigest(m.Files)
		return m
	}
	if err := withKeys([]string{testPub(1)}, keyEntry(t, testPub(1))).Validate(); err != nil {
		t.Fatalf("image with its key file: %v", err)
	}
	wrongMode := keyEntry(t, testPub(1))
	wrongMode.Mode = 0o666
	for name, m := range map[string]*manifests.ImageManifest{
		"file of a key not listed":  withKeys([]string{testPub(1)}, keyEntry(t, testPub(1)), keyEntry(t, testPub(2))),
		"listed key without a file": withKeys([]string{testPub(1), testPub(2)}, keyEntry(t, testPub(1))),
		"world-writable key file":   withKeys([]string{testPub(1)}, wrongMode),
		"listed key not a key":      withKeys([]string{"RWQ"}),
	} {
		if err := m.Validate(); !errors.Is(err, manifests.ErrInvalid) {
			t.Errorf("%s: Validate() = %v, want ErrInvalid", name, err)
		}
	}
}

func sortEntries(es []manifests.Entry) []manifests.Entry {
	slices.SortFunc(es, func(a, b manifests.Entry) int { return strings.Compare(a.Path, b.Path) })
	return es
}
