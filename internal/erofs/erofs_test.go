package erofs_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/erofs"
	"github.com/strata-dev/strata/internal/loop"
	"github.com/strata-dev/strata/internal/testenv"
)

// sample is a layer: a file, an empty file, a link, a whiteout, an
// opaque directory, and a directory of 300 entries (several blocks of
// dirents, and more inodes than one metadata block holds).
func sample() ([]erofs.Node, map[string][]byte) {
	nodes := []erofs.Node{
		{Path: "etc", Type: erofs.Dir, Mode: 0o755},
		{Path: "etc/app.conf", Type: erofs.File, Mode: 0o640, UID: 0, GID: 42, Size: 6},
		{Path: "etc/empty", Type: erofs.File, Mode: 0o600, UID: 1000, GID: 1000},
		{Path: "etc/link", Type: erofs.Symlink, Mode: 0o777, Target: "app.conf"},
		{Path: "etc/gone", Type: erofs.Whiteout},
		{Path: "etc/fresh", Type: erofs.Dir, Mode: 0o700, Opaque: true},
		{Path: "etc/fresh/big", Type: erofs.File, Mode: 0o4755, Size: 3*erofs.BlockSize + 17},
		{Path: "usr", Type: erofs.Dir, Mode: 0o755},
		{Path: "usr/many", Type: erofs.Dir, Mode: 0o755},
	}
	content := map[string][]byte{
		"etc/app.conf":  []byte("a=1\nb\n"),
		"etc/fresh/big": bytes.Repeat([]byte("0123456789abcdef"), (3*erofs.BlockSize+17)/16+1)[:3*erofs.BlockSize+17],
	}
	for i := 0; i < 300; i++ {
		p := fmt.Sprintf("usr/many/-entry-with-a-long-name-%03d", i)
		nodes = append(nodes, erofs.Node{Path: p, Type: erofs.File, Mode: 0o644, Size: int64(len(p))})
		content[p] = []byte(p)
	}
	return nodes, content
}

// write plans nodes and writes an image of them to a new file, the
// contents in the order given.
func write(t *testing.T, nodes []erofs.Node, content map[string][]byte, order []string) string {
	t.Helper()
	im, err := erofs.Plan(nodes)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "layer.erofs")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(im.Size()); err != nil {
		t.Fatal(err)
	}
	if err := im.WriteMeta(f); err != nil {
		t.Fatal(err)
	}
	for _, path := range order {
		if err := im.WriteFile(f, path, bytes.NewReader(content[path])); err != nil {
			t.Fatal(err)
		}
	}
	if u := im.Unwritten(); len(u) != 0 {
		t.Fatalf("unwritten: %v", u)
	}
	return p
}

func keys(m map[string][]byte, reverse bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	if reverse {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out
}

func TestSameTreeSameBytes(t *testing.T) {
	nodes, content := sample()
	a := write(t, nodes, content, keys(content, false))
	rev := append([]erofs.Node(nil), nodes...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	b := write(t, rev, content, keys(content, true))
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if len(ab) == 0 || len(ab)%erofs.BlockSize != 0 || !bytes.Equal(ab, bb) {
		t.Fatalf("two writes of one tree differ (%d and %d bytes)", len(ab), len(bb))
	}
	// A changed mode is a different image.
	nodes[1].Mode = 0o644
	c := write(t, nodes, content, keys(content, false))
	if cb, _ := os.ReadFile(c); bytes.Equal(ab, cb) {
		t.Fatal("a changed mode wrote the same image")
	}
}

func TestRefusesWhatIsNotATree(t *testing.T) {
	file := erofs.Node{Path: "f", Type: erofs.File, Mode: 0o644, Size: 1}
	for name, nodes := range map[string][]erofs.Node{
		"no parent":          {{Path: "a/b", Type: erofs.File}},
		"parent not a dir":   {file, {Path: "f/x", Type: erofs.File}},
		"twice":              {file, file},
		"absolute":           {{Path: "/etc", Type: erofs.Dir}},
		"dot dot":            {{Path: "..", Type: erofs.Dir}},
		"empty part":         {{Path: "a//b", Type: erofs.Dir}},
		"long name":          {{Path: strings.Repeat("n", 256), Type: erofs.Dir}},
		"opaque file":        {{Path: "f", Type: erofs.File, Opaque: true}},
		"empty link":         {{Path: "l", Type: erofs.Symlink}},
		"mode out of range":  {{Path: "f", Type: erofs.File, Mode: 0o10000}},
		"negative size":      {{Path: "f", Type: erofs.File, Size: -1}},
		"unknown type":       {{Path: "f", Type: 9}},
		"nul in link target": {{Path: "l", Type: erofs.Symlink, Target: "a\x00b"}},
	} {
		if _, err := erofs.Plan(nodes); !errors.Is(err, erofs.ErrInvalid) {
			t.Errorf("%s: Plan = %v, want ErrInvalid", name, err)
		}
	}
	im, err := erofs.Plan([]erofs.Node{file})
	if err != nil {
		t.Fatal(err)
	}
	var buf fileBuf
	if err := im.WriteFile(&buf, "f", strings.NewReader("")); !errors.Is(err, erofs.ErrInvalid) {
		t.Errorf("short content: %v", err)
	}
	if err := im.WriteFile(&buf, "f", strings.NewReader("ab")); !errors.Is(err, erofs.ErrInvalid) {
		t.Errorf("long content: %v", err)
	}
	if err := im.WriteFile(&buf, "g", strings.NewReader("a")); !errors.Is(err, erofs.ErrInvalid) {
		t.Errorf("unknown file: %v", err)
	}
	if u := im.Unwritten(); len(u) != 1 || u[0] != "f" {
		t.Errorf("Unwritten = %v, want [f]", u)
	}
}

type fileBuf struct{ b []byte }

func (f *fileBuf) WriteAt(p []byte, off int64) (int, error) {
	if need := int(off) + len(p); need > len(f.b) {
		f.b = append(f.b, make([]byte, need-len(f.b))...)
	}
	return copy(f.b[off:], p), nil
}

// TestFsckExtracts has erofs-utils' fsck check the image and extract it.
func TestFsckExtracts(t *testing.T) {
	testenv.RequireTools(t, []string{"fsck.erofs"})
	nodes, content := sample()
	img := write(t, nodes, content, keys(content, false))
	out := filepath.Join(t.TempDir(), "x")
	if b, err := exec.Command("fsck.erofs", "--extract="+out, img).CombinedOutput(); err != nil {
		t.Fatalf("fsck.erofs: %v\n%s", err, b)
	}
	checkTree(t, out, nodes, content, false)
}

// TestKernelMounts mounts the image, alone and as an overlayfs layer
// over a lower directory whose entries the whiteout and the opaque
// directory hide.
func TestKernelMounts(t *testing.T) {
	testenv.RequireKernel(t)
	nodes, content := sample()
	img := write(t, nodes, content, keys(content, false))
	dir := t.TempDir()
	mnt, low, stack := filepath.Join(dir, "m"), filepath.Join(dir, "low"), filepath.Join(dir, "s")
	for _, d := range []string{mnt, filepath.Join(low, "etc/fresh"), stack} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"etc/gone", "etc/fresh/old", "etc/kept"} {
		if err := os.WriteFile(filepath.Join(low, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := loop.Mount(img, loop.Config{ReadOnly: true}, mnt, "erofs", unix.MS_NODEV, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	checkTree(t, mnt, nodes, content, true)
	if err := unix.Mount("overlay", stack, "overlay", unix.MS_RDONLY, "lowerdir="+mnt+":"+low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(stack, unix.MNT_DETACH) })
	for p, want := range map[string]bool{"etc/gone": false, "etc/fresh/old": false, "etc/kept": true, "etc/fresh/big": true, "etc/app.conf": true} {
		if _, err := os.Lstat(filepath.Join(stack, p)); (err == nil) != want {
			t.Errorf("stack: %s there = %v, want %v", p, err == nil, want)
		}
	}
}

// checkTree compares a tree on disk with the nodes and their content.
func checkTree(t *testing.T, root string, nodes []erofs.Node, content map[string][]byte, mounted bool) {
	t.Helper()
	for _, n := range nodes {
		p := filepath.Join(root, n.Path)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Errorf("%s: %v", n.Path, err)
			continue
		}
		mask := uint32(0o7777)
		if !mounted {
			mask = 0o777 // fsck.erofs extracts without set-id bits
		}
		if n.Type != erofs.Whiteout && (st.Mode&mask != n.Mode&mask || st.Uid != n.UID || st.Gid != n.GID) {
			t.Errorf("%s: mode %o owner %d:%d, want %o %d:%d", n.Path, st.Mode&0o7777, st.Uid, st.Gid, n.Mode, n.UID, n.GID)
		}
		switch n.Type {
		case erofs.File:
			b, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(b, content[n.Path]) {
				t.Errorf("%s: content %q (%v), want %d bytes", n.Path, b, err, len(content[n.Path]))
			}
		case erofs.Symlink:
			if got, err := os.Readlink(p); err != nil || got != n.Target {
				t.Errorf("%s: link to %q (%v), want %q", n.Path, got, err, n.Target)
			}
		case erofs.Whiteout:
			if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
				t.Errorf("%s: mode %o rdev %d, want a character device 0:0", n.Path, st.Mode, st.Rdev)
			}
		case erofs.Dir:
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				t.Errorf("%s: not a directory", n.Path)
			}
			if mounted {
				buf := make([]byte, 8)
				n2, err := unix.Lgetxattr(p, "trusted.overlay.opaque", buf)
				if got := err == nil && string(buf[:n2]) == "y"; got != n.Opaque {
					t.Errorf("%s: opaque %v (%v), want %v", n.Path, got, err, n.Opaque)
				}
			}
		}
	}
	if mounted {
		ents, err := os.ReadDir(filepath.Join(root, "usr/many"))
		if err != nil || len(ents) != 300 {
			t.Errorf("usr/many: %d entries (%v), want 300", len(ents), err)
		}
	}
}
