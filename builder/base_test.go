package builder_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/compress"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// member is one tar member of a test tarball.
type member struct {
	name     string
	typ      byte
	mode     int64
	uid, gid int
	body     string
	link     string
	major    int64
}

// rootfsMembers is a small root file system as a distribution tarball has
// it: owners, setuid, symlinks, a hard link, device nodes and scratch
// files that the rootfs rules drop.
var rootfsMembers = []member{
	{name: "./", typ: tar.TypeDir, mode: 0755},
	{name: "./etc/", typ: tar.TypeDir, mode: 0755},
	{name: "./etc/passwd", typ: tar.TypeReg, mode: 0644, body: "root:x:0:0::/root:/bin/sh\n"},
	{name: "./etc/shadow", typ: tar.TypeReg, mode: 0640, gid: 42, body: "root:*:1::::::\n"},
	{name: "./etc/localtime", typ: tar.TypeSymlink, mode: 0777, link: "/usr/share/zoneinfo/UTC"},
	{name: "./usr/", typ: tar.TypeDir, mode: 0755},
	{name: "./usr/bin/", typ: tar.TypeDir, mode: 0755},
	{name: "./usr/bin/su", typ: tar.TypeReg, mode: 04755, body: "#!/bin/sh\necho su\n"},
	{name: "./usr/bin/su-again", typ: tar.TypeLink, mode: 04755, link: "./usr/bin/su"},
	{name: "./bin", typ: tar.TypeSymlink, mode: 0777, link: "usr/bin"},
	{name: "./home/", typ: tar.TypeDir, mode: 0755},
	{name: "./home/user/", typ: tar.TypeDir, mode: 0700, uid: 1000, gid: 1000},
	{name: "./home/user/notes", typ: tar.TypeReg, mode: 0600, uid: 1000, gid: 1000, body: "mine\n"},
	{name: "./dev/", typ: tar.TypeDir, mode: 0755},
	{name: "./dev/null", typ: tar.TypeChar, mode: 0666, major: 1},
	{name: "./dev/pts/", typ: tar.TypeDir, mode: 0755},
	{name: "./tmp/", typ: tar.TypeDir, mode: 01777},
	{name: "./tmp/junk", typ: tar.TypeReg, mode: 0644, body: "junk"},
	{name: "./run/", typ: tar.TypeDir, mode: 0755},
	{name: "./run/initctl", typ: tar.TypeFifo, mode: 0600},
	{name: "./var/lib/strata/ledger.json", typ: tar.TypeReg, mode: 0644, body: "{}"},
}

// writeTarball writes members as a tarball compressed with alg.
func writeTarball(t *testing.T, path string, alg compress.Algorithm, members []member) {
	t.Helper()
	var buf bytes.Buffer
	zw, err := compress.NewWriter(&buf, alg)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	for _, m := range members {
		h := &tar.Header{Name: m.name, Typeflag: m.typ, Mode: m.mode, Uid: m.uid, Gid: m.gid,
			Linkname: m.link, Devmajor: m.major, Size: int64(len(m.body)), ModTime: time.Unix(1, 0)}
		if m.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(m.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tarRecipe writes a recipe layering base on a tarball in dir.
func tarRecipe(t *testing.T, dir, tarball, extra string) string {
	return writeRecipe(t, dir, "line: rootfs\nversion: 1.0.0\nbase:\n  tar: "+tarball+"\n"+extra)
}

func TestTarBase(t *testing.T) {
	requireTools(t)
	key := testKey(t)
	var digest string
	for _, alg := range []compress.Algorithm{compress.None, compress.Gzip, compress.Zstd, compress.Xz} {
		t.Run(string(alg), func(t *testing.T) {
			dir := t.TempDir()
			writeTarball(t, filepath.Join(dir, "rootfs.tar"+alg.Ext()), alg, rootfsMembers)
			recipe := tarRecipe(t, dir, "rootfs.tar"+alg.Ext(), "files:\n  - path: /etc/hostname\n    content: \"node\\n\"\n")
			res, err := builder.Build(context.Background(), recipe, filepath.Join(dir, "out"), builder.WithKey(key))
			if err != nil {
				t.Fatal(err)
			}
			m := res.ManifestData
			if digest == "" {
				digest = m.TreeDigest
			} else if m.TreeDigest != digest {
				t.Errorf("tree digest %s differs from the uncompressed tarball's %s", m.TreeDigest, digest)
			}
			got := tree.NewState(m.Files)
			want := map[string]string{ // path -> "type mode uid:gid"
				"etc/shadow":       "file 0640 0:42",
				"usr/bin/su":       "file 4755 0:0",
				"usr/bin/su-again": "file 4755 0:0",
				"etc/localtime":    "symlink 0777 0:0",
				"bin":              "symlink 0777 0:0",
				"home/user":        "dir 0700 1000:1000",
				"home/user/notes":  "file 0600 1000:1000",
				"dev":              "dir 0755 0:0",
				"tmp":              "dir 1777 0:0",
				"run":              "dir 0755 0:0",
			}
			for p, w := range want {
				e, ok := got[p]
				if s := entryString(e); !ok || s != w {
					t.Errorf("%s = %q, want %q", p, s, w)
				}
			}
			if got["usr/bin/su-again"].SHA256 != got["usr/bin/su"].SHA256 {
				t.Errorf("hard link content differs from its target")
			}
			for _, p := range []string{"dev/null", "dev/pts", "tmp/junk", "run/initctl", "var/lib/strata", "var/lib/strata/ledger.json"} {
				if _, ok := got[p]; ok {
					t.Errorf("%s is in the image; the rootfs rules drop it", p)
				}
			}
			// The squashfs holds exactly what the manifest says.
			es, contents := readImage(t, res.Image)
			if d := manifests.TreeDigest(withoutManifest(es)); d != m.TreeDigest {
				t.Errorf("image tree digest %s, manifest says %s", d, m.TreeDigest)
			}
			if string(contents["usr/bin/su-again"]) != "#!/bin/sh\necho su\n" {
				t.Errorf("hard link content %q", contents["usr/bin/su-again"])
			}
		})
	}
}

func entryString(e manifests.Entry) string {
	return fmt.Sprintf("%s %04o %d:%d", e.Type, uint32(e.Mode), e.UID, e.GID)
}

func withoutManifest(es []manifests.Entry) []manifests.Entry {
	var out []manifests.Entry
	for _, e := range es {
		if e.Path != manifests.ImageManifestPath {
			out = append(out, e)
		}
	}
	return out
}

func TestTarBaseRefusals(t *testing.T) {
	tests := []struct {
		name    string
		members []member
		want    error
	}{
		{"device outside dev", []member{{name: "etc/", typ: tar.TypeDir, mode: 0755}, {name: "etc/disk", typ: tar.TypeBlock, mode: 0600, major: 8}}, tree.ErrSpecialFile},
		{"fifo outside run", []member{{name: "fifo", typ: tar.TypeFifo, mode: 0600}}, tree.ErrSpecialFile},
		{"hard link to nothing", []member{{name: "a", typ: tar.TypeLink, link: "b"}}, tree.ErrNotExist},
		{"hard link climbing", []member{{name: "a", typ: tar.TypeLink, link: "../etc/passwd"}}, manifests.ErrUnsafePath},
		{"absolute member", []member{{name: "/etc/passwd", typ: tar.TypeReg, mode: 0644}}, manifests.ErrUnsafePath},
		{"climbing member", []member{{name: "../x", typ: tar.TypeReg, mode: 0644}}, manifests.ErrUnsafePath},
		{"climbing symlink", []member{{name: "l", typ: tar.TypeSymlink, link: "../../x"}}, manifests.ErrUnsafePath},
		{"duplicate", []member{{name: "a", typ: tar.TypeReg}, {name: "./a", typ: tar.TypeReg}}, tree.ErrDuplicate},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		writeTarball(t, filepath.Join(dir, "rootfs.tar.gz"), compress.Gzip, tt.members)
		_, err := builder.Build(context.Background(), tarRecipe(t, dir, "rootfs.tar.gz", ""), filepath.Join(dir, "out"))
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: Build = %v, want %v", tt.name, err, tt.want)
		}
		if ents, _ := os.ReadDir(filepath.Join(dir, "out")); len(ents) != 0 {
			t.Errorf("%s: a failed build left %d files in its output directory", tt.name, len(ents))
		}
	}
	// A truncated tarball is an error, not a smaller tree.
	dir := t.TempDir()
	p := filepath.Join(dir, "rootfs.tar")
	writeTarball(t, p, compress.None, rootfsMembers)
	b, _ := os.ReadFile(p)
	if err := os.WriteFile(p, b[:700], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := builder.Build(context.Background(), tarRecipe(t, dir, "rootfs.tar", ""), filepath.Join(dir, "out")); err == nil {
		t.Error("a truncated tarball built")
	}
}
