package overlay_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

func TestScratch(t *testing.T) {
	f := newFixture(t)
	root := f.provision()
	b, _ := os.ReadFile(filepath.Join(root, manifests.ImageManifestPath))
	fmt.Println(string(b)[:3000])
	es, _ := tree.Scan(root, nil)
	for _, e := range es {
		fmt.Println(e.Path, e.Type, e.Mode, e.UID)
	}
	l, _ := os.ReadFile(filepath.Join(root, manifests.LedgerPath))
	fmt.Println(string(l))
}
