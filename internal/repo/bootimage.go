package repo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/uki"
	"github.com/strata-dev/strata/manifests"
)

// checkedBoot is a boot image checked for publication: a copy in memory,
// so that what was checked is what is written.
type checkedBoot struct {
	src  string
	data []byte
	sum  string
}

// checkBootImage reads the boot image at p (a regular file, at most
// manifests.MaxBootImageSize bytes) and checks it for image (manifest im,
// its checked verity record vd): the image must have one, and the boot
// image must be a signed UKI that boots exactly its root hash.
func checkBootImage(image string, im *Image, vd *VerityDoc, p string) (*checkedBoot, error) {
	if vd == nil {
		return nil, fmt.Errorf("adding image %s with boot image %s: the image has no verity record, and a boot image finds and opens its root by the signed root hash: %w", image, p, manifests.ErrBootImage)
	}
	data, err := safefile.ReadFollow(p, manifests.MaxBootImageSize)
	if err != nil {
		return nil, uki.OpenError(err)
	}
	// The bytes read are checked, and written: not the path again.
	if _, err := uki.CheckBootImageAt(p, bytes.NewReader(data), int64(len(data)), vd.Verity.RootHash); err != nil {
		return nil, fmt.Errorf("adding image %s %s: %w", im.Manifest.Line, im.Manifest.Version, err)
	}
	return &checkedBoot{src: p, data: data, sum: hexSHA256(data)}, nil
}

// ref is where the boot image of the image with manifest m is published.
func (b *checkedBoot) ref(m *manifests.ImageManifest) *manifests.BootImageRef {
	return &manifests.BootImageRef{File: path.Join("images", fmt.Sprintf("%s-%s.%s.efi", m.Line, m.Version, b.sum[:16])),
		SHA256: b.sum, Size: int64(len(b.data))}
}

// put writes the boot image as ref names it.
func (b *checkedBoot) put(ctx context.Context, st Putter, ref *manifests.BootImageRef) error {
	if err := st.Put(ctx, ref.File, bytes.NewReader(b.data)); err != nil {
		return fmt.Errorf("publishing boot image %s: %w", b.src, err)
	}
	return nil
}

// setBootImage publishes b as the boot image of upgrade image u (of the
// image with manifest m) of the repository r in dir, and saves the index
// signed with key; the file of a boot image it replaces is removed after.
func setBootImage(ctx context.Context, r *Repo, dir string, m *manifests.ImageManifest, u *manifests.ImageRef, b *checkedBoot, key *sign.Key) (*manifests.ImageRef, error) {
	ref := b.ref(m)
	old := u.Boot
	if old != nil && old.SHA256 == ref.SHA256 && old.File == ref.File {
		return u, nil // published already
	}
	st := Dir(dir)
	if there, err := Exists(ctx, st, ref.File); err != nil {
		return nil, err
	} else if there {
		return nil, fmt.Errorf("publishing boot image %s: %s exists already and the index does not name it: %w", b.src, ref.File, ErrExists)
	}
	u.Boot = ref
	if err := r.Index.Validate(); err != nil {
		u.Boot = old
		return nil, fmt.Errorf("publishing boot image %s: %w", b.src, err)
	}
	ok := false
	defer func() {
		if !ok {
			u.Boot = old
			_ = st.Remove(context.WithoutCancel(ctx), ref.File)
		}
	}()
	if err := b.put(ctx, st, ref); err != nil {
		return nil, err
	}
	if err := r.Save(ctx, key); err != nil {
		return nil, err
	}
	ok = true
	if old != nil && old.File != ref.File {
		_ = st.Remove(ctx, old.File)
	}
	return u, nil
}

func hexSHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
