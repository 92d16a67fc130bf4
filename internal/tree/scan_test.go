package tree_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func mustWrite(t *testing.T, p, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func TestScan(t *testing.T) {
	testenv.RequireRoot(t)
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "usr/bin/su"), "su\n", 0o755|fs.ModeSetuid)
	mustWrite(t, filepath.Join(root, "usr/bin/wall"), "wall\n", 0o755|fs.ModeSetgid)
	mustWrite(t, filepath.Join(root, "etc/owned"), "owned\n", 0o640)
	mustWrite(t, filepath.Join(root, "etc/empty"), "", 0o600)
	if err := os.Mkdir(filepath.Join(root, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o777|fs.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("owned", filepath.Join(root, "etc/rel")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin/su", filepath.Join(root, "etc/abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(root, "etc/owned"), 1234, 5678); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(root, "etc/rel"), 1234, 5678); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"etc", "usr", "usr/bin"} {
		if err := os.Chmod(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := tree.Scan(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []manifests.Entry{
		{Path: "etc", Type: manifests.TypeDir, Mode: 0755},
		{Path: "etc/abs", Type: manifests.TypeSymlink, Mode: 0777, Target: "/usr/bin/su"},
		{Path: "etc/empty", Type: manifests.TypeFile, Mode: 0600, Size: 0, SHA256: sum("")},
		{Path: "etc/owned", Type: manifests.TypeFile, Mode: 0640, UID: 1234, GID: 5678, Size: 6, SHA256: sum("owned\n")},
		{Path: "etc/rel", Type: manifests.TypeSymlink, Mode: 0777, UID: 1234, GID: 5678, Target: "owned"},
		{Path: "tmp", Type: manifests.TypeDir, Mode: 01777},
		{Path: "usr", Type: manifests.TypeDir, Mode: 0755},
		{Path: "usr/bin", Type: manifests.TypeDir, Mode: 0755},
		{Path: "usr/bin/su", Type: manifests.TypeFile, Mode: 04755, Size: 3, SHA256: sum("su\n")},
		{Path: "usr/bin/wall", Type: manifests.TypeFile, Mode: 02755, Size: 5, SHA256: sum("wall\n")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Scan =\n%+v\nwant\n%+v", got, want)
	}
	for _, e := range got {
		if err := e.Validate(); err != nil {
			t.Errorf("scanned entry invalid: %v", err)
		}
	}

	// skip leaves a directory out with everything below it.
	skipped, err := tree.Scan(root, func(rel string) bool { return rel == "usr" || rel == "etc/owned" })
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range skipped {
		paths = append(paths, e.Path)
	}
	if want := []string{"etc", "etc/abs", "etc/empty", "etc/rel", "tmp"}; !reflect.DeepEqual(paths, want) {
		t.Fatalf("Scan with skip = %v, want %v", paths, want)
	}
}

func TestScanRefusesFIFO(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "a/file"), "x", 0o644)
	if err := syscall.Mkfifo(filepath.Join(root, "a/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := tree.Scan(root, nil)
	if !errors.Is(err, tree.ErrSpecialFile) {
		t.Fatalf("Scan with a FIFO = %v, want ErrSpecialFile", err)
	}
	if !strings.Contains(err.Error(), "fifo") {
		t.Errorf("error %q does not name the FIFO", err)
	}
	// Skipping it makes the scan pass.
	if _, err := tree.Scan(root, func(rel string) bool { return rel == "a/fifo" }); err != nil {
		t.Fatalf("Scan skipping the FIFO: %v", err)
	}
}

func TestScanHardlinkIsFile(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "a"), "same", 0o644)
	if err := os.Link(filepath.Join(root, "a"), filepath.Join(root, "b")); err != nil {
		t.Fatal(err)
	}
	got, err := tree.Scan(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Type != manifests.TypeFile || got[1].SHA256 != sum("same") {
		t.Fatalf("Scan of hard links = %+v", got)
	}
}

func TestModeConversions(t *testing.T) {
	for _, m := range []manifests.Mode{0, 0644, 0755, 04755, 02755, 01777, 07777, 06711} {
		if got := tree.ModeOf(tree.FileMode(m)); got != m {
			t.Errorf("ModeOf(FileMode(%04o)) = %04o", m, got)
		}
	}
	if fm := tree.FileMode(04755); fm&fs.ModeSetuid == 0 || fm.Perm() != 0o755 {
		t.Errorf("FileMode(04755) = %v", fm)
	}
	if fm := tree.FileMode(01777); fm&fs.ModeSticky == 0 {
		t.Errorf("FileMode(01777) = %v", fm)
	}
}

func TestCreateSetMeta(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	content := "#!/bin/sh\n"
	file := manifests.Entry{Path: "su", Type: manifests.TypeFile, Mode: 04755, UID: 1234, GID: 5678, Size: int64(len(content)), SHA256: sum(content)}
	p := filepath.Join(dir, "su")
	if err := tree.Create(p, file, strings.NewReader(content)); err != nil {
		t.Fatal(err)
	}
	got, err := tree.StatEntry(p, "su")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, file) {
		t.Fatalf("created %+v, want %+v", got, file)
	}
	// Changing the owner of a setuid file with SetMeta keeps the bits:
	// chown clears them, so the mode must be applied afterwards.
	file.UID, file.GID, file.Mode = 4321, 8765, 06750
	if err := tree.SetMeta(p, file); err != nil {
		t.Fatal(err)
	}
	if got, _ = tree.StatEntry(p, "su"); !reflect.DeepEqual(got, file) {
		t.Fatalf("after SetMeta %+v, want %+v", got, file)
	}

	// A directory gets its mode even when it forbids writing.
	d := manifests.Entry{Path: "ro", Type: manifests.TypeDir, Mode: 01555, UID: 1000, GID: 1000}
	if err := tree.Create(filepath.Join(dir, "ro"), d, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := tree.StatEntry(filepath.Join(dir, "ro"), "ro"); !reflect.DeepEqual(got, d) {
		t.Fatalf("created dir %+v, want %+v", got, d)
	}

	// A symlink gets its owner, not its target's.
	l := manifests.Entry{Path: "l", Type: manifests.TypeSymlink, Mode: 0777, UID: 1234, GID: 5678, Target: "../nowhere"}
	if err := tree.Create(filepath.Join(dir, "l"), l, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := tree.StatEntry(filepath.Join(dir, "l"), "l"); !reflect.DeepEqual(got, l) {
		t.Fatalf("created symlink %+v, want %+v", got, l)
	}

	// Existing paths, bad content and special types are refused.
	if err := tree.Create(p, file, strings.NewReader(content)); err == nil {
		t.Error("Create over an existing file succeeded")
	}
	bad := manifests.Entry{Type: manifests.TypeFile, Mode: 0644, Size: int64(len(content)), SHA256: sum("other")}
	if err := tree.Create(filepath.Join(dir, "bad"), bad, strings.NewReader(content)); err == nil {
		t.Error("Create with content not matching sha256 succeeded")
	}
	short := manifests.Entry{Type: manifests.TypeFile, Mode: 0644, Size: 100, SHA256: sum(content)}
	if err := tree.Create(filepath.Join(dir, "short"), short, strings.NewReader(content)); err == nil {
		t.Error("Create with a short content stream succeeded")
	}
	if err := tree.Create(filepath.Join(dir, "dev"), manifests.Entry{Type: "chardev"}, nil); !errors.Is(err, tree.ErrSpecialFile) {
		t.Errorf("Create of a device = %v, want ErrSpecialFile", err)
	}
}

// A scan stops once its context is cancelled: here as the walk skips a
// path, before anything below it is hashed.
func TestScanContextCancelled(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a/x", "b/y", "c/z"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seen []string
	_, err := tree.ScanContext(ctx, dir, func(rel string) bool {
		seen = append(seen, rel)
		if rel == "b" {
			cancel()
		}
		return false
	})
	if !errors.Is(err, context.Canceled) || strings.Join(seen, " ") != "a a/x b" {
		t.Fatalf("scan: %v after %v, want context.Canceled right after b", err, seen)
	}
	if got, err := tree.ScanContext(context.Background(), dir, nil); err != nil || len(got) != 6 {
		t.Fatalf("uncancelled scan: %d entries, %v", len(got), err)
	}
}

// Files are hashed on several goroutines while the tree is walked; the
// entries are those of a scan that hashes each in turn (StatEntry), in
// order, and a file met after one the walk refuses does not change which
// error is reported.
func TestScanConcurrentHashing(t *testing.T) {
	dir := t.TempDir()
	for i := range 300 {
		size := (i * 7919) % (300 << 10) // up to 300 KiB: several reads each
		mustWrite(t, filepath.Join(dir, fmt.Sprintf("d%d/f%03d", i%7, i)), strings.Repeat(string(rune('a'+i%26)), size), 0o640)
	}
	got, err := tree.Scan(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []manifests.Entry
	for _, e := range got {
		w, err := tree.StatEntry(filepath.Join(dir, e.Path), e.Path)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, w)
	}
	if len(got) != 307 || !reflect.DeepEqual(got, want) {
		t.Fatalf("scan gave %d entries, not those hashed one by one", len(got))
	}

	// A FIFO in the middle of the walk: its error, whatever was being
	// hashed when the walk met it.
	if err := syscall.Mkfifo(filepath.Join(dir, "d3/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Scan(dir, nil); !errors.Is(err, tree.ErrSpecialFile) || !strings.Contains(err.Error(), "d3/fifo") {
		t.Fatalf("scan with a FIFO: %v", err)
	}
}

// A file that cannot be read is the error a scan reports, not the stop
// of a file before it in walk order that another hasher was reading when
// it failed (a node's audit named /etc/ssh/moduli "context canceled"
// instead of the layer image block the kernel refused).
func TestScanReportsTheFailedFileNotTheOnesItStopped(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a/slow", "a/x1", "a/x2", "b/bad", "c/after"} {
		mustWrite(t, filepath.Join(dir, p), p, 0o644)
	}
	eio := &os.PathError{Op: "read", Path: "b/bad", Err: syscall.EIO}
	tree.SetScanHashing(t, 2, func(ctx context.Context, p string, h hash.Hash, buf []byte) (string, int64, error) {
		switch filepath.Base(p) {
		case "slow": // still being read when b/bad fails
			select {
			case <-ctx.Done():
				return "", 0, fmt.Errorf("hashing %s: %w", p, ctx.Err())
			case <-time.After(time.Minute):
				return "", 0, fmt.Errorf("hashing %s: never stopped", p)
			}
		case "bad":
			return "", 0, fmt.Errorf("hashing %s: %w", p, eio)
		}
		return tree.HashInto(ctx, p, h, buf)
	})
	_, err := tree.Scan(dir, nil)
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "b/bad") {
		t.Fatalf("scan: %v, want the read error of b/bad", err)
	}

	// Cancelled by its caller, the scan reports that.
	ctx, cancel := context.WithCancel(context.Background())
	tree.SetScanHashing(t, 2, func(c context.Context, p string, h hash.Hash, buf []byte) (string, int64, error) {
		cancel()
		<-c.Done()
		return "", 0, fmt.Errorf("hashing %s: %w", p, c.Err())
	})
	if _, err := tree.ScanContext(ctx, dir, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled scan: %v", err)
	}
}
