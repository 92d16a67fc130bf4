package overlayfs_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/manifests"
)

// layersOf is the layers directory of the test node at root (its state
// beside it).
func layersOf(root string) string {
	return filepath.Join(filepath.Dir(root), "state", "var", manifests.StateDir[len("var/"):], "layers")
}

// appliedLayer returns what the ledger of the node at root recorded of
// version's layer image.
func appliedLayer(t *testing.T, root, version string) *manifests.LayerImage {
	t.Helper()
	l, err := nodestate.Node{Root: root}.ReadLedger()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Applied() {
		if e.Version == version && e.Layer != nil {
			return e.Layer
		}
	}
	t.Fatalf("the ledger records no layer image of %s", version)
	return nil
}

// mountedLayer returns where version's layer image is mounted below the
// node's /run.
func mountedLayer(t *testing.T, root, version string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(root, "run/strata/layers", version+"-*"))
	if len(m) != 1 {
		t.Fatalf("mounts of layer %s: %v, want one", version, m)
	}
	return m[0]
}

// checkImage checks the layer image at path against its record: its
// size and digest, and its dm-verity tree with veritysetup, given the
// record's values alone.
func checkImage(t *testing.T, path string, li *manifests.LayerImage) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != li.SHA256 || int64(len(raw)) != li.Size {
		t.Fatalf("%s: %d bytes, sha256 %x; the ledger says %d, %s", path, len(raw), sum, li.Size, li.SHA256)
	}
	if out, err := exec.Command("veritysetup", "verify", path, path, li.RootHash, "--no-superblock",
		"--data-blocks="+strconv.FormatInt(li.DataBlocks, 10), "--hash-offset="+strconv.FormatInt(li.DataBlocks*manifests.VerityBlockSize, 10),
		"--salt="+li.Salt).CombinedOutput(); err != nil {
		t.Fatalf("veritysetup verify %s: %v\n%s", path, err, out)
	}
}

// flip changes one byte of the file at path, at offset off.
func flip(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// shutdown unmounts the node at root as a shutdown does: every mount
// below it, the last mounted first (so a layer image goes before the /var
// that holds its file), trying again while a loop device still holds its
// file (the kernel detaches it asynchronously after the last unmount).
func shutdown(t *testing.T, root string) {
	t.Helper()
	for range 100 {
		raw, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		var points []string
		for _, ln := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(ln); len(f) > 4 && (f[4] == root || strings.HasPrefix(f[4], root+"/")) {
				points = append(points, f[4])
			}
		}
		if len(points) == 0 {
			return
		}
		for _, p := range slices.Backward(points) {
			if err := unix.Unmount(p, 0); err != nil && err != unix.EBUSY && err != unix.EINVAL {
				t.Fatalf("unmounting %s: %v", p, err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the node at %s is still mounted", root)
}

// toLayerDirs turns the node at root (booted from image) into one whose
// layers are directories, as strata wrote them before layer images: each
// mounted image's tree copied to layers/<version>, the ledger's records
// of the images dropped, the images removed, and the node rebooted.
func toLayerDirs(t *testing.T, image, root string) {
	t.Helper()
	n := nodestate.Node{Root: root}
	l, err := n.ReadLedger()
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	old := &manifests.Ledger{Schema: l.Schema, Kind: l.Kind}
	for _, e := range l.Entries {
		if e.Layer != nil {
			dir := filepath.Join(layersOf(root), e.Version)
			if out, err := exec.Command("cp", "-a", mountedLayer(t, root, e.Version), dir).CombinedOutput(); err != nil {
				t.Fatalf("copying layer %s: %v: %s", e.Version, err, out)
			}
			images = append(images, filepath.Join(layersOf(root), e.Version+".erofs"))
			e.Layer = nil
		}
		if err := old.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.WriteLedger(old); err != nil {
		t.Fatal(err)
	}
	shutdown(t, root)
	for _, p := range images {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	boot(t, image, filepath.Join(filepath.Dir(root), "state"), root)
}
