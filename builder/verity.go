package builder

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/verity"
	"github.com/strata-dev/strata/manifests"
)

// veritySalt is the salt of an image's hash tree: derived from the image
// manifest's digest, so that a rebuild writes the same bytes (as
// systemd-repart derives its verity salts from a seed) and no two images
// share one.
func veritySalt(digest string) []byte {
	s := sha256.Sum256([]byte("strata verity salt\x00" + digest))
	return s[:]
}

// sealImage appends the dm-verity hash tree to the image img, whose
// manifest m has digest digest, and writes the signed verity record
// beside it (unsigned without a key, as the manifest is). It returns the
// record.
func sealImage(ctx context.Context, img string, m *manifests.ImageManifest, digest string, s *settings) (*manifests.Verity, error) {
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("sealing image %s: %w", img, err)
	}
	defer f.Close()
	t, err := verity.Append(ctx, f, veritySalt(digest))
	if err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("sealing image %s: %w", img, err)
	}
	v := verity.Record(m.Line, m.Version, digest, t)
	raw, err := manifests.Encode(v)
	if err != nil {
		return nil, err
	}
	vp := repo.VerityPath(img)
	if s.key != nil {
		if err := safefile.WriteAtomic(repo.SigPath(vp), s.key.Sign(raw, sign.VerityComment(m.Line, m.Version)), 0o644); err != nil {
			return nil, err
		}
	} else {
		_ = os.Remove(repo.SigPath(vp))
	}
	if err := safefile.WriteAtomic(vp, raw, 0o644); err != nil {
		return nil, err
	}
	s.progress(fmt.Sprintf("wrote %s (dm-verity root hash %s)", vp, v.RootHash))
	return v, ctx.Err()
}

// VerifyImage reads the image file img whole and checks it and its
// appended hash tree against the verity record v, as dm-verity would on
// reads: the error names the first block that does not match.
func VerifyImage(ctx context.Context, img string, v *manifests.Verity) error {
	p, root, err := verity.FromRecord(v)
	if err != nil {
		return err
	}
	f, err := safefile.OpenFollow(img)
	if err != nil {
		return fmt.Errorf("verifying image %s: %w", img, err)
	}
	defer f.Close()
	return verity.VerifyFile(ctx, f, p, root)
}
