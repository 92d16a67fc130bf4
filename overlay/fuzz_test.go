package overlay_test

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/strata-dev/strata/internal/archive/archivetest"
	"github.com/strata-dev/strata/internal/compress"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	. "github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// fuzzRepo builds the shared fixture for a fuzz target and returns its
// key and repository.
func fuzzRepo(tb testing.TB) (*sign.Key, string) {
	tb.Helper()
	f := fixture.New(tb)
	return f.Key, f.Repo
}

// fuzzSeeds returns the key whose public half the fuzz targets trust and
// seed archives: good ones, real overlays made by Create in every
// compression and a crafted one (also uncompressed, so mutations reach the
// payload's tar headers rather than dying in a decompressor), and bad
// crafted ones.
func fuzzSeeds(tb testing.TB) (key *sign.Key, good, bad [][]byte) {
	tb.Helper()
	key, repoDir := fuzzRepo(tb)
	host := func(content string) string {
		p := filepath.Join(tb.TempDir(), "src")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
		return p
	}
	var first *Created
	for _, c := range []struct {
		version, algo string
		ch            Change
	}{
		{"1.0.1", "zstd", Change{Adds: []Add{{Dest: "/etc/app/app.conf", Src: host("port 81\n")}}}},
		{"1.0.2", "none", Change{Adds: []Add{{Dest: "/etc/motd", Src: host("bye\n")}}, Deletes: []string{"/usr/share/doc/readme"}}},
		{"1.0.3", "gzip", Change{Adds: []Add{{Dest: "/usr/lib/systemd/system/app.service", Src: host("[Service]\nExecStart=/usr/bin/app -v\n")}}}},
		{"1.0.4", "xz", Change{Adds: []Add{{Dest: "/etc/app/conf.d/b.conf", Src: host("b\n")}}}},
	} {
		cr, err := Create(context.Background(), repoDir, key, c.ch, CreateOptions{Version: c.version, Compression: c.algo})
		if err != nil {
			tb.Fatalf("creating %s: %v", c.version, err)
		}
		if first == nil {
			first = cr
		}
		b, err := os.ReadFile(cr.Path)
		if err != nil {
			tb.Fatal(err)
		}
		good = append(good, b)
	}

	// Crafted: a dir, a file in it and a symlink, with the manifest of
	// the first real overlay otherwise.
	m := *first.Manifest
	dir := manifests.Entry{Path: "etc/new", Type: manifests.TypeDir, Mode: 0o755}
	file := fixture.ContentEntry("etc/new/f", "fuzz me\n")
	link := manifests.Entry{Path: "etc/new/l", Type: manifests.TypeSymlink, Mode: 0o777, Target: "f"}
	m.Entries = []manifests.Entry{dir, file, link}
	payload := []member{treeMember(dir), fixture.FileMember(file, []byte("fuzz me\n")), treeMember(link)}
	raw, head := signedOverlayHead(tb, &m, key)
	good = append(good,
		archivetest.Write(tb, "", compress.None, append(head, payload...), false),
		archivetest.Write(tb, "", compress.Zstd, append(head, payload...), false),
	)
	bad = append(bad,
		// unsigned
		archivetest.Write(tb, "", compress.None, append(overlayHead(raw, nil), payload...), false),
		// a member larger than its entry
		archivetest.Write(tb, "", compress.None, append(head, payload[0], fixture.FileMember(file, []byte("fuzz me more\n")), payload[2]), false),
		// an extra member, and a hard link
		archivetest.Write(tb, "", compress.None, append(head, append(payload, hdrMember(&tar.Header{Name: "etc/new/h", Typeflag: tar.TypeLink, Linkname: "etc/new/f"}, ""))...), false),
		// a member header claiming far more than follows
		archivetest.Write(tb, "", compress.None, append(head, payload[0], fuzzBigHeader(file)), true),
	)
	return key, good, bad
}

// fuzzBigHeader is e's member with a header claiming 1 MiB, followed by only
// e's content.
func fuzzBigHeader(e manifests.Entry) member {
	m := fixture.FileMember(e, []byte("fuzz me\n"))
	m.Hdr.Size = 1 << 20
	return m
}

// FuzzReadArchive feeds arbitrary bytes to the archive reader: it must
// never panic, and what it accepts must be a valid manifest whose every
// entry validates.
func FuzzReadArchive(f *testing.F) {
	key, good, bad := fuzzSeeds(f)
	trust, err := key.PublicKeySet()
	if err != nil {
		f.Fatal(err)
	}
	for i, s := range good {
		if _, err := ReadArchive(bytes.NewReader(s), trust); err != nil {
			f.Fatalf("good seed %d: %v", i, err)
		}
		f.Add(s)
	}
	for i, s := range bad {
		if _, err := ReadArchive(bytes.NewReader(s), trust); err == nil {
			f.Fatalf("bad seed %d accepted", i)
		}
		f.Add(s)
	}
	f.Add([]byte{})
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := ReadArchive(bytes.NewReader(data), trust)
		if err != nil {
			return
		}
		if a == nil || a.Manifest == nil {
			t.Fatalf("ReadArchive returned %+v and no error", a)
		}
		if err := a.Manifest.Validate(); err != nil {
			t.Fatalf("accepted a manifest that does not validate: %v", err)
		}
		for _, e := range a.Manifest.Entries {
			if err := e.Validate(); err != nil {
				t.Fatalf("accepted entry %+v: %v", e, err)
			}
		}
		if a.Digest != manifests.Digest(a.Raw) {
			t.Fatalf("digest %s is not the digest of the manifest bytes", a.Digest)
		}
		if a.KeyID != key.ID() {
			t.Fatalf("accepted a manifest signed by %s, trusted only %s", a.KeyID, key.ID())
		}
	})
}

// fuzzManifest is a hand-made overlay manifest that validates.
func fuzzManifest() *manifests.OverlayManifest {
	d := manifests.Digest([]byte("x"))
	return &manifests.OverlayManifest{
		Schema: manifests.Schema, Kind: manifests.KindOverlay, Line: "test", Version: "1.0.1",
		Parent: manifests.Ref{Version: "1.0.0", Digest: d}, Lineage: []manifests.Ref{{Version: "1.0.0", Digest: d}},
		Requires: manifests.Requires{Image: "^1.0.0"},
		Entries: []manifests.Entry{
			{Path: "etc", Type: manifests.TypeDir, Mode: 0o755},
			fixture.ContentEntry("etc/a", "a\n"),
			{Path: "etc/l", Type: manifests.TypeSymlink, Mode: 0o777, Target: "../usr/bin"},
		},
		Deletes:   []string{"usr/share/doc"},
		Services:  []manifests.ServiceAction{{Unit: "app.service", Action: manifests.ActionRestart, Because: []string{"etc/a"}}},
		Unclaimed: []string{"etc/l"}, TreeDigest: d, Created: "2026-01-01T00:00:00Z",
	}
}

// FuzzDecodeOverlayManifest feeds arbitrary JSON to the manifest decoder
// and validator: they must never panic, and a manifest that validates must
// have valid entries and survive an encode/decode round trip unchanged.
func FuzzDecodeOverlayManifest(f *testing.F) {
	m := fuzzManifest()
	raw, err := manifests.Encode(m)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	for _, mutate := range []func(*manifests.OverlayManifest){
		func(m *manifests.OverlayManifest) { m.Version = "1.0.0" },
		func(m *manifests.OverlayManifest) { m.Entries[1].Path = "etc/../etc/a" },
		func(m *manifests.OverlayManifest) { m.Entries[2].Target = "../../../../etc/passwd" },
		func(m *manifests.OverlayManifest) { m.Entries = append(m.Entries, m.Entries[1]) },
		func(m *manifests.OverlayManifest) { m.Lineage = nil },
		func(m *manifests.OverlayManifest) { m.Requires.Image = ">= 1.2, < 2 || ^3" },
		func(m *manifests.OverlayManifest) {
			m.Catalog = &manifests.Catalog{}
			m.Version = "1.0.1-rc.1+build.5"
		},
	} {
		c := fuzzManifest()
		mutate(c)
		b, err := manifests.Encode(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"schema":1,"kind":"overlay","entries":[{"path":"a","type":"file","mode":"07777","size":-1}]}`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m manifests.OverlayManifest
		if err := manifests.Decode(data, &m); err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			return
		}
		for i, e := range m.Entries {
			if err := e.Validate(); err != nil {
				t.Fatalf("valid manifest has invalid entry %+v: %v", e, err)
			}
			if i > 0 && m.Entries[i-1].Path >= e.Path {
				t.Fatalf("valid manifest has unsorted or duplicate entries at %s", e.Path)
			}
		}
		for _, d := range m.Deletes {
			if err := manifests.ValidPath(d); err != nil {
				t.Fatalf("valid manifest deletes %q: %v", d, err)
			}
		}
		// What a node computes from a valid manifest must not panic.
		_ = m.Ancestors(m.Parent.Version)
		_ = m.Ancestors("0.0.0")
		_ = manifests.CompareVersions(m.Version, m.Parent.Version)
		if _, err := manifests.Satisfies(m.Parent.Version, m.Requires.Image); err != nil {
			t.Fatalf("valid manifest's constraint %q fails on version %q: %v", m.Requires.Image, m.Parent.Version, err)
		}
		again, err := manifests.Encode(&m)
		if err != nil {
			t.Fatalf("encoding a valid manifest: %v", err)
		}
		var m2 manifests.OverlayManifest
		if err := manifests.Decode(again, &m2); err != nil {
			t.Fatalf("decoding a re-encoded valid manifest: %v\n%s", err, again)
		}
		if err := m2.Validate(); err != nil {
			t.Fatalf("re-encoded valid manifest does not validate: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(&m, &m2) {
			t.Fatalf("round trip changed the manifest:\n%+v\n%+v", m, m2)
		}
	})
}
