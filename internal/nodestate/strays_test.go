package nodestate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// Issue 25, item 10: a kill during a ledger write left
// .ledger.json.<random> in the state directory, which nothing removed or
// reported.
func TestStrays(t *testing.T) {
	n := Node{Root: t.TempDir()}
	if err := os.MkdirAll(n.ManifestStore(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := safefile.WriteAtomic(n.Path(manifests.LedgerPath), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	left := []string{
		filepath.Join(n.StateDir(), ".ledger.json.123456789"),
		filepath.Join(n.ManifestStore(), ".1.0.2.json.42"),
	}
	for _, p := range left {
		if err := os.WriteFile(p, []byte("half"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	keep := []string{filepath.Join(n.StateDir(), "ledger.json"), filepath.Join(n.StateDir(), ".ledger.json.tmp")}
	if err := os.WriteFile(keep[1], nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(n.StateDir(), ".dir.7"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := n.Strays()
	if err != nil || strings.Join(got, " ") != strings.Join(left, " ") {
		t.Fatalf("Strays = %v, %v; want %v", got, err, left)
	}
	if got, err = n.RemoveStrays(); err != nil || len(got) != 2 {
		t.Fatalf("RemoveStrays = %v, %v", got, err)
	}
	for _, p := range left {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s stayed", p)
		}
	}
	for _, p := range append(keep, filepath.Join(n.StateDir(), ".dir.7")) {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
}
