package archivetest

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/compress"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// Member is one tar member of an overlay archive.
type Member struct {
	Hdr  *tar.Header
	Data []byte
}

// Read decompresses the overlay archive at path into its members.
func Read(tb testing.TB, path string) []Member {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	r, _, err := compress.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	defer r.Close()
	tr := tar.NewReader(r)
	var out []Member
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			tb.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, Member{Hdr: h, Data: b})
	}
}

// Write writes members, headers exactly as given (a size that lies
// stays a lie), as an archive compressed with algo, to path unless path
// is empty, and returns its bytes. open leaves the tar without its end
// blocks.
func Write(tb testing.TB, path string, algo compress.Algorithm, members []Member, open bool) []byte {
	tb.Helper()
	var buf bytes.Buffer
	cw, err := compress.NewWriter(&buf, algo)
	if err != nil {
		tb.Fatal(err)
	}
	tw := tar.NewWriter(cw)
	for _, m := range members {
		if err := tw.WriteHeader(m.Hdr); err != nil {
			tb.Fatalf("writing header %s: %v", m.Hdr.Name, err)
		}
		if len(m.Data) > 0 {
			if _, err := tw.Write(m.Data); err != nil {
				tb.Fatalf("writing %s: %v", m.Hdr.Name, err)
			}
		}
	}
	if !open {
		if err := tw.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	if err := cw.Close(); err != nil {
		tb.Fatal(err)
	}
	if path != "" {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return buf.Bytes()
}

// Pack is Write with each header's size made true: the data's length for
// a regular file, zero for anything else.
func Pack(tb testing.TB, path string, algo compress.Algorithm, members []Member) []byte {
	tb.Helper()
	fixed := make([]Member, len(members))
	for i, m := range members {
		h := *m.Hdr
		h.Size = int64(len(m.Data))
		data := m.Data
		if h.Typeflag != tar.TypeReg {
			h.Size, data = 0, nil
		}
		fixed[i] = Member{Hdr: &h, Data: data}
	}
	return Write(tb, path, algo, fixed, false)
}

// Craft writes an overlay archive (zstd) at path: m's manifest, its
// signature by key (none when key is nil), then members. It returns the
// manifest's bytes.
func Craft(tb testing.TB, path string, m *manifests.OverlayManifest, key *sign.Key, members []Member) []byte {
	tb.Helper()
	raw, err := manifests.Encode(m)
	if err != nil {
		tb.Fatal(err)
	}
	mtime := time.Unix(1700000000, 0)
	head := []Member{{Hdr: &tar.Header{Name: archive.ManifestMember, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(raw)), ModTime: mtime}, Data: raw}}
	if key != nil {
		sig := key.Sign(raw, sign.OverlayComment(m.Line, m.Version))
		head = append(head, Member{Hdr: &tar.Header{Name: archive.SignatureMember, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(sig)), ModTime: mtime}, Data: sig})
	}
	Write(tb, path, compress.Zstd, append(head, members...), false)
	return raw
}
