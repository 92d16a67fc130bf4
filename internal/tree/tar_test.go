package tree_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// memOpener serves contents from a map keyed by path.
func memOpener(contents map[string]string) tree.Opener {
	return func(e manifests.Entry) (io.ReadCloser, error) {
		c, ok := contents[e.Path]
		if !ok {
			return nil, fmt.Errorf("no content for %s", e.Path)
		}
		return io.NopCloser(strings.NewReader(c)), nil
	}
}

func sampleTree() ([]manifests.Entry, map[string]string) {
	contents := map[string]string{
		"etc/passwd":        "root:x:0:0::/root:/bin/sh\n",
		"etc/secret":        "s3cret\n",
		"usr/bin/su":        "\x7fELF not really\x00\x01\x02",
		"usr/share/empty":   "",
		"usr/share/big.txt": strings.Repeat("0123456789abcdef", 4096),
	}
	es := []manifests.Entry{
		dirE("etc"),
		{Path: "etc/passwd", Type: manifests.TypeFile, Mode: 0644},
		{Path: "etc/secret", Type: manifests.TypeFile, Mode: 0600, UID: 1234, GID: 5678},
		linkE("etc/localtime", "/usr/share/zoneinfo/UTC"),
		linkE("etc/rel", "passwd"),
		{Path: "tmp", Type: manifests.TypeDir, Mode: 01777},
		dirE("usr"),
		dirE("usr/bin"),
		{Path: "usr/bin/su", Type: manifests.TypeFile, Mode: 04755},
		{Path: "usr/share", Type: manifests.TypeDir, Mode: 0750, UID: 1000, GID: 1000},
		{Path: "usr/share/big.txt", Type: manifests.TypeFile, Mode: 0444},
		{Path: "usr/share/empty", Type: manifests.TypeFile, Mode: 0644},
	}
	for i, e := range es {
		if e.Type == manifests.TypeFile {
			c := contents[e.Path]
			es[i].Size, es[i].SHA256 = int64(len(c)), sum(c)
		}
	}
	return es, contents
}

// readAll reads a tar stream back into entries (with hashes) and contents.
func readAll(t *testing.T, r io.Reader, limits tree.Limits) ([]manifests.Entry, map[string]string, error) {
	t.Helper()
	tr := tree.NewReader(r, limits)
	var es []manifests.Entry
	contents := map[string]string{}
	for {
		e, cr, err := tr.Next()
		if err == io.EOF {
			return es, contents, nil
		}
		if err != nil {
			return es, contents, err
		}
		if e.Type == manifests.TypeFile {
			b, err := io.ReadAll(cr)
			if err != nil {
				return es, contents, err
			}
			if e.SHA256 != "" {
				t.Errorf("Reader filled SHA256 for %s", e.Path)
			}
			e.SHA256 = sum(string(b))
			contents[e.Path] = string(b)
		}
		es = append(es, e)
	}
}

func TestWriteTarRoundTrip(t *testing.T) {
	es, contents := sampleTree()
	var a, b bytes.Buffer
	if err := tree.WriteTar(&a, es, memOpener(contents), 1700000000); err != nil {
		t.Fatal(err)
	}
	if err := tree.WriteTar(&b, es, memOpener(contents), 1700000000); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two WriteTar runs of the same entries differ")
	}
	got, gotContents, err := readAll(t, bytes.NewReader(a.Bytes()), tree.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, es) {
		t.Fatalf("round trip entries\n%+v\nwant\n%+v", got, es)
	}
	if !reflect.DeepEqual(gotContents, contents) {
		t.Fatal("round trip contents differ")
	}
	if manifests.TreeDigest(got) != manifests.TreeDigest(es) {
		t.Fatal("round trip changes the tree digest")
	}

	// Headers carry the fixed time, numeric owners only, and no names.
	tr := tar.NewReader(bytes.NewReader(a.Bytes()))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.ModTime.Unix() != 1700000000 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %v uname %q gname %q", h.Name, h.ModTime, h.Uname, h.Gname)
		}
	}

	// A different mtime changes the bytes but not the entries.
	var c bytes.Buffer
	if err := tree.WriteTar(&c, es, memOpener(contents), 1700000001); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Fatal("mtime does not reach the tar stream")
	}
}

func TestWriteTarFromDir(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "a/b"), "bee", 0o600)
	if err := os.Symlink("b", filepath.Join(root, "a/l")); err != nil {
		t.Fatal(err)
	}
	es, err := tree.Scan(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tree.WriteTar(&buf, es, tree.DirOpener(root), 0); err != nil {
		t.Fatal(err)
	}
	got, _, err := readAll(t, &buf, tree.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, es) {
		t.Fatalf("dir round trip\n%+v\nwant\n%+v", got, es)
	}
	// DirOpener does not follow a symlink planted where a file was.
	if err := os.Remove(filepath.Join(root, "a/b")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(root, "a/b")); err != nil {
		t.Fatal(err)
	}
	if err := tree.WriteTar(io.Discard, es, tree.DirOpener(root), 0); err == nil {
		t.Fatal("WriteTar followed a symlink planted in place of a file")
	}
}

func TestWriteTarRefusesChangedContent(t *testing.T) {
	es, contents := sampleTree()
	tests := map[string]string{
		"same size, other bytes": strings.ToUpper(contents["etc/passwd"]),
		"longer":                 contents["etc/passwd"] + "x",
		"shorter":                contents["etc/passwd"][1:],
	}
	for name, c := range tests {
		changed := map[string]string{}
		for k, v := range contents {
			changed[k] = v
		}
		changed["etc/passwd"] = c
		err := tree.WriteTar(io.Discard, es, memOpener(changed), 0)
		if err == nil || !strings.Contains(err.Error(), "etc/passwd") {
			t.Errorf("%s: WriteTar = %v, want an error naming etc/passwd", name, err)
		}
	}
	if err := tree.WriteTar(io.Discard, es, memOpener(map[string]string{}), 0); err == nil {
		t.Error("WriteTar with no content source succeeded")
	}
}

type member struct {
	h       tar.Header
	content string
}

func makeTar(t *testing.T, ms ...member) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range ms {
		h := m.h
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = int64(len(m.content))
		}
		if h.Mode == 0 {
			h.Mode = 0644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("writing %s: %v", h.Name, err)
		}
		if m.content != "" {
			if _, err := io.WriteString(tw, m.content); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func reg(name, content string) member {
	return member{h: tar.Header{Name: name, Typeflag: tar.TypeReg}, content: content}
}

func dirM(name string) member {
	return member{h: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0755}}
}

func TestReaderUnsafeMembers(t *testing.T) {
	small := tree.Limits{MaxFileSize: 10, MaxTotalSize: 15, MaxEntries: 4}
	tests := []struct {
		name    string
		members []member
		limits  tree.Limits
		target  error
	}{
		{"absolute", []member{reg("/etc/passwd", "x")}, tree.Limits{}, manifests.ErrUnsafePath},
		{"absolute dir", []member{dirM("/")}, tree.Limits{}, manifests.ErrUnsafePath},
		{"dotdot", []member{reg("../x", "x")}, tree.Limits{}, manifests.ErrUnsafePath},
		{"dotdot inside", []member{dirM("a/"), reg("a/../../x", "x")}, tree.Limits{}, manifests.ErrUnsafePath},
		{"dot-slash dotdot", []member{reg("./../x", "x")}, tree.Limits{}, manifests.ErrUnsafePath},
		{"bare dotdot", []member{dirM("../")}, tree.Limits{}, manifests.ErrUnsafePath},
		{"empty element", []member{dirM("a/"), reg("a//b", "x")}, tree.Limits{}, manifests.ErrUnsafePath},
		{"char device", []member{{h: tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}}, tree.Limits{}, tree.ErrSpecialFile},
		{"block device", []member{{h: tar.Header{Name: "sda", Typeflag: tar.TypeBlock, Devmajor: 8}}}, tree.Limits{}, tree.ErrSpecialFile},
		{"fifo", []member{{h: tar.Header{Name: "fifo", Typeflag: tar.TypeFifo}}}, tree.Limits{}, tree.ErrSpecialFile},
		{"hardlink in root", []member{reg("a", "x"), {h: tar.Header{Name: "b", Typeflag: tar.TypeLink, Linkname: "a"}}}, tree.Limits{}, tree.ErrHardlink},
		{"hardlink dot-slash in root", []member{reg("a", "x"), {h: tar.Header{Name: "b", Typeflag: tar.TypeLink, Linkname: "./a"}}}, tree.Limits{}, tree.ErrHardlink},
		{"hardlink out of root", []member{{h: tar.Header{Name: "b", Typeflag: tar.TypeLink, Linkname: "../../etc/shadow"}}}, tree.Limits{}, manifests.ErrUnsafePath},
		{"hardlink absolute", []member{{h: tar.Header{Name: "b", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"}}}, tree.Limits{}, manifests.ErrUnsafePath},
		{"symlink out of root", []member{dirM("a/"), {h: tar.Header{Name: "a/l", Typeflag: tar.TypeSymlink, Linkname: "../../x"}}}, tree.Limits{}, manifests.ErrUnsafePath},
		{"symlink empty target", []member{{h: tar.Header{Name: "l", Typeflag: tar.TypeSymlink}}}, tree.Limits{}, manifests.ErrUnsafePath},
		{"duplicate", []member{reg("a", "x"), reg("a", "y")}, tree.Limits{}, tree.ErrDuplicate},
		{"duplicate dir and file", []member{dirM("a/"), reg("a", "y")}, tree.Limits{}, tree.ErrDuplicate},
		{"duplicate after normalising", []member{dirM("etc/"), dirM("./etc")}, tree.Limits{}, tree.ErrDuplicate},
		{"over MaxFileSize", []member{reg("a", "12345678901")}, small, tree.ErrLimit},
		{"over MaxTotalSize", []member{reg("a", "1234567890"), reg("b", "123456")}, small, tree.ErrLimit},
		{"over MaxEntries", []member{dirM("a/"), dirM("b/"), dirM("c/"), dirM("d/"), dirM("e/")}, small, tree.ErrLimit},
		{"over default MaxFileSize", []member{{h: tar.Header{Name: "huge", Typeflag: tar.TypeReg, Size: 4<<30 + 1}}}, tree.Limits{}, tree.ErrLimit},
		{"unsupported type", []member{{h: tar.Header{Name: "x", Typeflag: 'Z'}}}, tree.Limits{}, tree.ErrSpecialFile},
	}
	for _, tt := range tests {
		var data []byte
		if tt.name == "over default MaxFileSize" {
			data = hugeHeaderOnly(t, tt.members[0].h)
		} else {
			data = makeTar(t, tt.members...)
		}
		_, _, err := readAll(t, bytes.NewReader(data), tt.limits)
		if !errors.Is(err, tt.target) {
			t.Errorf("%s: read = %v, want %v", tt.name, err, tt.target)
		}
	}
}

// hugeHeaderOnly returns a tar stream holding just h's header block: the
// reader must refuse the member from its header, before any content.
func hugeHeaderOnly(t *testing.T, h tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	h.Mode = 0644
	if err := tw.WriteHeader(&h); err != nil {
		t.Fatal(err)
	}
	if err := tw.Flush(); err == nil {
		t.Fatal("Flush of a member without content succeeded")
	}
	return buf.Bytes()
}

func TestReaderLimitsAtBoundary(t *testing.T) {
	limits := tree.Limits{MaxFileSize: 10, MaxTotalSize: 20, MaxEntries: 3}
	data := makeTar(t, reg("a", "1234567890"), reg("b", "1234567890"), dirM("c/"))
	es, _, err := readAll(t, bytes.NewReader(data), limits)
	if err != nil {
		t.Fatalf("members exactly at the limits: %v", err)
	}
	if len(es) != 3 {
		t.Fatalf("read %d entries", len(es))
	}
}

func TestReaderNormalises(t *testing.T) {
	data := makeTar(t,
		dirM("./"),
		dirM("./etc/"),
		reg("./etc/passwd", "root\n"),
		member{h: tar.Header{Name: "./etc/l", Typeflag: tar.TypeSymlink, Linkname: "passwd", Mode: 0755, Uid: 7, Gid: 8}},
		member{h: tar.Header{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o40755 | 04000}},
		member{h: tar.Header{Name: "usr/su", Typeflag: tar.TypeReg, Mode: 0o104755, Uid: 1, Gid: 2, Size: 2}, content: "su"},
	)
	got, _, err := readAll(t, bytes.NewReader(data), tree.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := []manifests.Entry{
		dirE("etc"),
		fileE("etc/passwd", "root\n"),
		{Path: "etc/l", Type: manifests.TypeSymlink, Mode: 0777, UID: 7, GID: 8, Target: "passwd"},
		{Path: "usr", Type: manifests.TypeDir, Mode: 04755},
		{Path: "usr/su", Type: manifests.TypeFile, Mode: 04755, UID: 1, GID: 2, Size: 2, SHA256: sum("su")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("normalised entries\n%+v\nwant\n%+v", got, want)
	}
	// A lone "." member is skipped as well.
	got, _, err = readAll(t, bytes.NewReader(makeTar(t, dirM("."), dirM("a"))), tree.Limits{})
	if err != nil || len(got) != 1 || got[0].Path != "a" {
		t.Fatalf("lone '.': %+v, %v", got, err)
	}
}

func TestReaderTruncated(t *testing.T) {
	data := makeTar(t, reg("a", strings.Repeat("x", 2000)))
	_, _, err := readAll(t, bytes.NewReader(data[:1024]), tree.Limits{})
	if err == nil {
		t.Fatal("truncated archive read without error")
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated archive: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, _, err := readAll(t, bytes.NewReader(nil), tree.Limits{}); err != nil {
		t.Fatalf("empty stream: %v", err)
	}
}
