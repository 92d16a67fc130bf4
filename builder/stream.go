package builder

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/strata-dev/strata/internal/imagefile"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// bigImage is the content size from which writing an image reports its
// progress (every tenth of the content).
const bigImage = 64 << 20

// streamImage streams entries as a deterministic tar into the image out
// (squashfs unless WithFormat says otherwise), reporting progress for big
// trees.
func streamImage(ctx context.Context, out, comp string, epoch int64, entries []manifests.Entry, open tree.Opener, s *settings) error {
	var total int64
	for _, e := range entries {
		total += e.Size
	}
	return s.format.Write(ctx, out, imagefile.WriteOptions{Compressor: comp, Epoch: epoch}, func(w io.Writer) error {
		if total >= bigImage {
			w = &progressWriter{w: w, total: total, report: s.progress, fraction: s.fraction}
		}
		return tree.WriteTar(w, entries, open, epoch)
	})
}

// progressWriter reports each tenth of total bytes written.
type progressWriter struct {
	w        io.Writer
	n, total int64
	tenths   int64 // reported so far
	percent  int64 // fraction reported so far, in percent
	report   func(string)
	fraction func(string, int64, int64)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	if pc := min(p.n*100/p.total, 100); pc > p.percent {
		p.percent = pc
		p.fraction("writing image", min(p.n, p.total), p.total)
	}
	for p.tenths < 10 && p.n >= p.total*(p.tenths+1)/10 {
		p.tenths++
		p.report(fmt.Sprintf("writing image: %d%% of %d MiB", p.tenths*10, p.total>>20))
	}
	return n, err
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
