package builder

import (
	"bytes"
	"context"
	"io"

	"github.com/strata-dev/strata/internal/squashfs"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// squashfsWrite streams entries as a deterministic tar into mksquashfs.
func squashfsWrite(ctx context.Context, out, comp string, epoch int64, entries []manifests.Entry, open tree.Opener) error {
	return squashfs.Write(ctx, out, squashfs.WriteOptions{Compressor: comp, Epoch: epoch}, func(w io.Writer) error {
		return tree.WriteTar(w, entries, open, epoch)
	})
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
