package builder

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
)

// ErrNeedKey reports an operation that must sign what it makes.
var ErrNeedKey = errors.New("a signing key is needed")

// HeadImage returns an image of the line's head (or of version through),
// for provisioning a new machine that joins the line there: the line's own
// image when no overlay follows it, otherwise an image regenerated into
// workDir and signed with key (required then). The repository and chain are
// verified against key when it is given, else against the image's keys.
func HeadImage(ctx context.Context, repoDir, line, through, workDir string, key *sign.Key, opts ...Option) (string, error) {
	r, c, done, err := loadSigned(ctx, repoDir, line, through, newSettings(append(opts, WithKey(key))))
	if err != nil {
		return "", err
	}
	defer done()
	if len(c.Overlays) == 0 {
		if r.Dir == "" {
			if err := os.MkdirAll(workDir, 0o755); err != nil {
				return "", fmt.Errorf("fetching into %s: %w", workDir, err)
			}
			return repo.FetchImage(ctx, r, c.Line, workDir)
		}
		return r.Path(c.Line.Image.File), nil
	}
	if key == nil {
		return "", fmt.Errorf("provisioning line %s at %s: the head must be regenerated and signed: %w", c.Line.Name, c.Head().Version, ErrNeedKey)
	}
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		return "", fmt.Errorf("regenerating into %s: %w", workDir, err)
	}
	res, err := Regenerate(ctx, repoDir, c.Line.Name, through, workDir, append(opts, WithKey(key))...)
	if err != nil {
		return "", err
	}
	return res.Image, nil
}
