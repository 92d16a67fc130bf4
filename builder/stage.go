package builder

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// Stage unpacks the tree of chain c (a line verified by repo.LoadChain up
// to its last element) into the existing empty directory dir: the image's
// files that survive and each overlay's payload, every file checked
// against the folded tree as it streams. It is what a service's
// validation command runs against before a change is published.
func Stage(ctx context.Context, c *repo.Chain, dir string) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := foldStream(ctx, pw, c.Repo.Path(c.Line.Image.File), c.Fold, nil, 0)
		pw.CloseWithError(err)
		done <- err
	}()
	tr := tree.NewReader(pr, tree.Limits{})
	var err2 error
	for {
		e, r, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			err2 = fmt.Errorf("staging line %s: %w", c.Line.Name, err)
			break
		}
		if e.Type == manifests.TypeFile {
			e.SHA256 = c.State[e.Path].SHA256
		}
		if err := tree.Create(filepath.Join(dir, filepath.FromSlash(e.Path)), e, r); err != nil {
			err2 = fmt.Errorf("staging line %s: %w", c.Line.Name, err)
			break
		}
	}
	pr.CloseWithError(io.ErrClosedPipe)
	if err := <-done; err2 == nil && err != nil && err != io.ErrClosedPipe {
		err2 = fmt.Errorf("staging line %s: %w", c.Line.Name, err)
	}
	return err2
}
