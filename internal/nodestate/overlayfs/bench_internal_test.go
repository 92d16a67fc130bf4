package overlayfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// benchChange is an overlay of n files in 40 directories under
// usr/share/bench (sizes exponential around 24 KiB, a third of them
// random bytes), as scripts/bench.sh makes its change, with its payload
// in memory.
func benchChange(n int) *nodestate.Change {
	rnd := rand.New(rand.NewPCG(1, 2))
	m := &manifests.OverlayManifest{Version: "1.1.0"}
	after := tree.State{}
	for _, d := range []string{"usr", "usr/share", "usr/share/bench"} {
		after[d] = manifests.Entry{Path: d, Type: manifests.TypeDir, Mode: 0o755}
	}
	data := map[string][]byte{}
	for i := range n {
		dir := fmt.Sprintf("usr/share/bench/d%02d", i%40)
		after[dir] = manifests.Entry{Path: dir, Type: manifests.TypeDir, Mode: 0o755}
		size := 1 + int(rnd.ExpFloat64()*24*1024)
		b := make([]byte, size)
		for j := range b {
			if i%3 == 0 {
				b[j] = byte(rnd.Uint32())
			} else {
				b[j] = "abcdefgh "[rnd.IntN(9)]
			}
		}
		p := fmt.Sprintf("%s/f%05d", dir, i)
		sum := sha256.Sum256(b)
		e := manifests.Entry{Path: p, Type: manifests.TypeFile, Mode: 0o644, Size: int64(size), SHA256: hex.EncodeToString(sum[:])}
		m.Entries = append(m.Entries, e)
		after[p] = e
		data[p] = b
	}
	payload := func(ctx context.Context, fn func(manifests.Entry, io.Reader) error) error {
		for _, e := range m.Entries {
			if err := fn(e, bytes.NewReader(data[e.Path])); err != nil {
				return err
			}
		}
		return nil
	}
	return &nodestate.Change{Manifest: m, Payload: payload, After: after,
		Record: manifests.LedgerEntry{Version: m.Version, Digest: "sha256:" + hex.EncodeToString(make([]byte, 32))}}
}

// The layer of a 400-file overlay written as an image (EROFS, dm-verity
// tree, fsync, digest), as apply writes it, beside the directory layer it
// replaces (files, then syncfs, as apply wrote it before).
func BenchmarkLayer400(b *testing.B) {
	ch := benchChange(400)
	dir := b.TempDir()
	b.Run("image", func(b *testing.B) {
		for i := range b.N {
			p := filepath.Join(dir, fmt.Sprintf("img%d.erofs", i))
			_, k, err := writeLayerImage(context.Background(), p, ch)
			k.close()
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			os.Remove(p)
			b.StartTimer()
		}
	})
	b.Run("directory", func(b *testing.B) {
		for i := range b.N {
			p := filepath.Join(dir, fmt.Sprintf("dir%d", i))
			if err := writeLayer(context.Background(), p, ch); err != nil {
				b.Fatal(err)
			}
			if err := safefile.SyncFS(p); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			os.RemoveAll(p)
			b.StartTimer()
		}
	})
}
