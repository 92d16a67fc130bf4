package manifests_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

// bigImage is an image manifest of n file entries, the shape a node
// decodes on every run.
func bigImage(b *testing.B, n int) []byte {
	b.Helper()
	m := validImage()
	base := m.Files[len(m.Files)-1]
	for i := range n {
		e := base
		e.Path = fmt.Sprintf("usr/share/bench/f%06d", i)
		e.Type, e.Size, e.SHA256 = manifests.TypeFile, 3, strings.Repeat("a", 64)
		m.Files = append(m.Files, e)
	}
	raw, err := manifests.Encode(m)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

// BenchmarkDecodeImageManifest measures strict decoding (names checked
// for duplicates and case variants, then decoded) of a 4000-entry image
// manifest; BenchmarkDecodeImageManifestPlain is encoding/json alone, the
// peer.
func BenchmarkDecodeImageManifest(b *testing.B) {
	raw := bigImage(b, 4000)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		var m manifests.ImageManifest
		if err := manifests.Decode(raw, &m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeImageManifestPlain(b *testing.B) {
	raw := bigImage(b, 4000)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		var m manifests.ImageManifest
		if err := json.Unmarshal(raw, &m); err != nil {
			b.Fatal(err)
		}
	}
}
