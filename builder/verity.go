package builder

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"

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

// writeSealed has write make the image beside img, appends its dm-verity
// hash tree there, writes the signed verity record beside img (unsigned
// without a key, as the manifest is), and only then renames the image
// into place: an interrupted build leaves no image without its tree. The
// record names the manifest's digest, so a record left beside another
// image is refused as another image's. It returns the record.
func writeSealed(ctx context.Context, img string, m *manifests.ImageManifest, digest string, s *settings, write func(out string) error) (*manifests.Verity, error) {
	tmp := filepath.Join(filepath.Dir(img), "."+filepath.Base(img)+".unsealed")
	_ = os.Remove(tmp)
	defer os.Remove(tmp) // a no-op once renamed
	if err := write(tmp); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("sealing image %s: %w", img, err)
	}
	defer f.Close()
	t, err := verity.Append(ctx, f, veritySalt(digest))
	if err != nil {
		return nil, fmt.Errorf("sealing image %s: %w", img, err)
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
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, img); err != nil {
		return nil, fmt.Errorf("sealing image %s: %w", img, err)
	}
	s.progress(fmt.Sprintf("wrote %s (dm-verity root hash %s)", vp, v.RootHash))
	return v, ctx.Err()
}
