package builder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/strata-dev/strata/internal/imagefile"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// ErrImageMismatch reports an image whose content disagrees with its
// signed manifest (of the manifests.ErrRejected class).
var ErrImageMismatch = manifests.Rejection("image does not match its manifest")

// Provision makes a directory node at root from a signed image: the
// image's tree plus a ledger naming it. The image is verified (signature,
// then every entry against the manifest while it streams) into a sibling
// directory that is renamed to root only when all is well. root must not
// exist or be empty. trust nil checks the manifest against the keys it
// lists.
func Provision(ctx context.Context, image, root string, trust *sign.KeySet, opts ...Option) (*manifests.LedgerEntry, error) {
	s := newSettings(opts)
	im, err := repo.LoadImage(image, trust)
	if err != nil {
		return nil, err
	}
	if ents, err := os.ReadDir(root); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("provisioning %s: directory is not empty", root)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("provisioning %s: %w", root, err)
	}
	tmp := filepath.Join(filepath.Dir(filepath.Clean(root)), "."+filepath.Base(root)+".provisioning")
	undoParents, err := safefile.MkdirParents(tmp)
	if err != nil {
		return nil, err
	}
	_ = os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o755); err != nil {
		undoParents()
		return nil, fmt.Errorf("provisioning %s: %w", root, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(tmp)
			undoParents()
		}
	}()
	s.progress(fmt.Sprintf("unpacking %s into %s", image, root))
	if err := ExtractImage(ctx, image, im, tmp); err != nil {
		return nil, err
	}
	m := im.Manifest
	l, err := ProvisionLedger(im)
	if err != nil {
		return nil, err
	}
	nd := nodestate.Node{Root: tmp}
	if err := nd.WriteLedger(l); err != nil {
		return nil, err
	}
	// Keep the image manifest's signature, so audits with an outside key
	// can check the manifest the node's expected tree comes from.
	if sig, err := safefile.Read(repo.SigPath(repo.ManifestPath(image)), sign.MaxSignatureSize); err == nil {
		if err := safefile.WriteAtomic(nd.Path(manifests.ImageSigPath), sig, 0o644); err != nil {
			return nil, err
		}
	}
	_ = os.Remove(root) // an empty directory may stand in the way
	if err := os.Rename(tmp, root); err != nil {
		return nil, fmt.Errorf("provisioning %s: %w", root, err)
	}
	ok = true
	s.progress(fmt.Sprintf("node %s at %s %s (tree %s)", root, m.Line, l.Last().Head.Version, m.TreeDigest))
	last := l.Last()
	return &last, nil
}

// ExtractImage unpacks image into the existing empty directory dir,
// checking every entry against the verified manifest im: the tree digest
// of what was unpacked must equal the manifest's, and the image's own copy
// of the manifest must be byte-identical.
func ExtractImage(ctx context.Context, image string, im *repo.Image, dir string) error {
	return WalkImage(ctx, image, im, func(e manifests.Entry, r io.Reader) error {
		if e.Path == manifests.ImageManifestPath {
			if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(e.Path)), im.Raw, 0o644); err != nil {
				return fmt.Errorf("provisioning: %w", err)
			}
			return nil
		}
		if err := tree.Create(filepath.Join(dir, filepath.FromSlash(e.Path)), e, r); err != nil {
			return fmt.Errorf("image %s: %w: %v", image, ErrImageMismatch, err)
		}
		return nil
	})
}

// WalkImage streams image and calls fn for every entry, checked against
// the verified manifest im before fn sees it: type, owner, mode, size and
// link target must be what the manifest lists, and e.SHA256 is the
// manifest's hash, which fn must check the content against as it reads it
// (tree.Create does). The embedded manifest must be byte-identical to
// im.Raw; fn gets it too, already read. At the end the tree digest of
// everything else must equal the manifest's. A disagreement with the
// manifest wraps ErrImageMismatch; fn's errors are returned as they are.
func WalkImage(ctx context.Context, image string, im *repo.Image, fn func(e manifests.Entry, r io.Reader) error) error {
	rd, err := imagefile.Open(ctx, image)
	if err != nil {
		return err
	}
	want := tree.NewState(im.Manifest.Files)
	var got []manifests.Entry
	sawManifest := false
	tr := tree.NewReader(rd, tree.Limits{})
	for {
		e, r, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			rd.Close()
			return fmt.Errorf("reading image %s: %w", image, err)
		}
		if e.Path == manifests.ImageManifestPath {
			b, err := io.ReadAll(r)
			if err != nil || string(b) != string(im.Raw) {
				rd.Close()
				return fmt.Errorf("image %s: embedded manifest differs from %s: %w", image, repo.ManifestPath(image), ErrImageMismatch)
			}
			sawManifest = true
			if err := fn(e, bytes.NewReader(b)); err != nil {
				rd.Close()
				return err
			}
			continue
		}
		w, known := want[e.Path]
		if !known {
			rd.Close()
			return fmt.Errorf("image %s: %s is not in the manifest: %w", image, e.Path, ErrImageMismatch)
		}
		if e.Type == manifests.TypeFile {
			e.SHA256 = w.SHA256
		}
		// Every entry must be exactly what the manifest says before it is
		// used: type, owner, mode, size and link target (content is
		// hashed as it is read), so nothing lands through a symlink.
		if e != w {
			rd.Close()
			return fmt.Errorf("image %s: %s is %s %04o %d:%d in the image but %s %04o %d:%d in the manifest: %w",
				image, e.Path, e.Type, uint32(e.Mode), e.UID, e.GID, w.Type, uint32(w.Mode), w.UID, w.GID, ErrImageMismatch)
		}
		if err := fn(e, r); err != nil {
			rd.Close()
			return err
		}
		got = append(got, e)
	}
	if err := rd.Close(); err != nil {
		return err
	}
	if !sawManifest {
		return fmt.Errorf("image %s: no embedded manifest at /%s: %w", image, manifests.ImageManifestPath, ErrImageMismatch)
	}
	if d := manifests.TreeDigest(got); d != im.Manifest.TreeDigest {
		return fmt.Errorf("image %s: tree digest %s, manifest says %s: %w", image, d, im.Manifest.TreeDigest, ErrImageMismatch)
	}
	return nil
}

// ProvisionLedger starts a node's ledger with the record of the image it is
// provisioned from: for a regenerated image, its base version and the head
// it contains.
func ProvisionLedger(im *repo.Image) (*manifests.Ledger, error) {
	m := im.Manifest
	e := manifests.LedgerEntry{
		Action:     manifests.LedgerProvision,
		Line:       m.Line,
		Version:    m.Version,
		Digest:     im.Digest,
		Image:      m.Version,
		Head:       manifests.Ref{Version: m.Version, Digest: im.Digest},
		TreeDigest: m.TreeDigest,
		Time:       time.Now().UTC().Format(time.RFC3339),
	}
	if m.Head != nil {
		e.Image = m.Base.Version
		e.Head = *m.Head
	}
	l := &manifests.Ledger{Schema: manifests.Schema, Kind: manifests.KindLedger}
	if err := l.Append(e); err != nil {
		return nil, err
	}
	return l, nil
}
