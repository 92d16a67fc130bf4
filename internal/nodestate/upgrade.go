package nodestate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// ImageStore is the directory that keeps the signed manifests of images
// the node needs but may not be running (DIGEST-HEX.json and
// DIGEST-HEX.json.minisig): the image of a staged upgrade, and the line's
// image after an upgrade to a new recipe (the overlays' tree digests fold
// from it).
func (n Node) ImageStore() string { return filepath.Join(n.StateDir(), "images") }

func (n Node) storedImage(digest string) string {
	return filepath.Join(n.ImageStore(), strings.TrimPrefix(digest, "sha256:")+".json")
}

// StoreImage keeps an image's signed manifest with the node state.
func (n Node) StoreImage(digest string, raw, sig []byte) error {
	if !manifests.ValidDigest(digest) || manifests.Digest(raw) != digest {
		return fmt.Errorf("storing image manifest %s: content has digest %s", digest, manifests.Digest(raw))
	}
	p := n.storedImage(digest)
	if err := safefile.WriteAtomic(p+".minisig", sig, 0o644); err != nil {
		return err
	}
	return safefile.WriteAtomic(p, raw, 0o644)
}

// StoredImage reads a stored image manifest and its signature; the
// manifest must have digest.
func (n Node) StoredImage(digest string) (raw, sig []byte, err error) {
	if !manifests.ValidDigest(digest) {
		return nil, nil, fmt.Errorf("stored image manifest: %q is not a digest", digest)
	}
	p := n.storedImage(digest)
	if raw, err = safefile.Read(p, manifests.MaxManifestSize); err != nil {
		return nil, nil, fmt.Errorf("stored image manifest: %w", err)
	}
	if d := manifests.Digest(raw); d != digest {
		return nil, nil, fmt.Errorf("stored image manifest %s has digest %s: %w", p, d, ErrBadState)
	}
	if sig, err = safefile.Read(p+".minisig", 64<<10); err != nil {
		return nil, nil, fmt.Errorf("stored image manifest: %w", err)
	}
	return raw, sig, nil
}

// PruneImages removes every stored image manifest whose digest is not in
// keep.
func (n Node) PruneImages(keep ...string) error {
	ents, err := os.ReadDir(n.ImageStore())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pruning stored images: %w", err)
	}
	want := map[string]bool{}
	for _, d := range keep {
		h := strings.TrimPrefix(d, "sha256:")
		want[h+".json"], want[h+".json.minisig"] = true, true
	}
	for _, e := range ents {
		if want[e.Name()] && e.Type().IsRegular() {
			continue
		}
		if err := os.RemoveAll(filepath.Join(n.ImageStore(), e.Name())); err != nil {
			return fmt.Errorf("pruning stored images: %w", err)
		}
	}
	return nil
}

// Staged reads the node's staged upgrade; nil when there is none.
func (n Node) Staged() (*manifests.StagedUpgrade, error) {
	return readDoc[manifests.StagedUpgrade](n, manifests.UpgradePath, 1<<20, "staged upgrade")
}

// Stage writes the node's staged upgrade (atomically).
func (n Node) Stage(u *manifests.StagedUpgrade) error { return writeDoc(n, manifests.UpgradePath, u) }

// ClearStaged removes the staged upgrade, if any.
func (n Node) ClearStaged() error { return removeDoc(n, manifests.UpgradePath, "the staged upgrade") }

// BootID returns the running kernel's boot id.
func BootID() (string, error) {
	raw, err := safefile.Read("/proc/sys/kernel/random/boot_id", 64)
	if err != nil {
		return "", fmt.Errorf("reading the boot id: %w", err)
	}
	id := strings.TrimSpace(string(raw))
	if !manifests.ValidBootID(id) {
		return "", fmt.Errorf("reading the boot id: %q is not one", id)
	}
	return id, nil
}

// View is what a node's state says about it once a staged upgrade is
// taken into account.
type View struct {
	// Ledger is the node's ledger; on a trial boot, with the staged
	// upgrade's record appended (in memory only: the boot is not
	// confirmed yet).
	Ledger *manifests.Ledger
	// Staged is the staged upgrade, if any.
	Staged *manifests.StagedUpgrade
	// Trial reports that the node runs the staged upgrade's image.
	Trial bool
	// ImageRaw is the image manifest the node's tree carries.
	ImageRaw []byte
}

// Effective reads the ledger, the staged upgrade and the image manifest
// the node's tree carries. When an upgrade is staged and the tree carries
// its image, the node is on a trial boot of it: the view's ledger then has
// the upgrade's record appended, so that the layers it keeps are the ones
// in effect.
func (n Node) Effective() (*View, error) {
	l, err := n.ReadLedger()
	if err != nil {
		return nil, err
	}
	u, err := n.Staged()
	if err != nil {
		return nil, err
	}
	raw, err := safefile.Read(n.Path(manifests.ImageManifestPath), manifests.MaxManifestSize)
	if err != nil {
		return nil, fmt.Errorf("node %s: reading image manifest: %w", n.Root, err)
	}
	v := &View{Ledger: l, Staged: u, ImageRaw: raw}
	if u != nil && manifests.Digest(raw) == u.Record.Digest && l.Running().Digest != u.Record.Digest {
		trial := &manifests.Ledger{Schema: l.Schema, Kind: l.Kind, Entries: slices.Clone(l.Entries)}
		rec := u.Record
		rec.Time = u.Staged
		if err := trial.Append(rec); err != nil {
			return nil, err
		}
		v.Ledger, v.Trial = trial, true
	}
	return v, nil
}

// maxBootRefusal bounds the initramfs's note of a refused boot.
const maxBootRefusal = 4 << 10

// TakeBootRefusal returns, and removes, the note a disk node's initramfs
// left when it refused to boot a root ("" when there is none). The note
// is one line of text, at most 4 KiB; control characters and anything
// that is not UTF-8 are replaced. A note that is not a regular file, or
// is larger, is refused as node state planted by someone else, and
// removed, so it is reported once.
func (n Node) TakeBootRefusal() (string, error) {
	if err := n.CheckState(); err != nil {
		return "", err
	}
	p := n.Path(manifests.BootRefusalPath)
	raw, err := safefile.Read(p, maxBootRefusal)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		// Reported once: a link, FIFO or oversized note goes (the name,
		// never what it points to).
		_ = os.Remove(p)
		return "", fmt.Errorf("reading the boot refusal note: %w: %w", ErrBadState, err)
	}
	note := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(string(raw), "?"))
	if err := removeDoc(n, manifests.BootRefusalPath, "the boot refusal note"); err != nil {
		return "", err
	}
	return strings.Join(strings.Fields(note), " "), nil
}
