package nodestate_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/manifests"
)

// A node gets one identity key: made on first use with create (0600),
// the same key after, the same key for two processes racing to make it;
// without create a missing key is ErrNoIdentity; a key file planted as a
// link is refused.
func TestIdentity(t *testing.T) {
	root := t.TempDir()
	n := nodestate.Node{Root: root}
	if err := os.MkdirAll(n.StateDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Identity(false); !errors.Is(err, nodestate.ErrNoIdentity) {
		t.Fatalf("Identity(false) on a node without one: %v", err)
	}
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := n.Identity(true)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = k.PublicString()
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("racing makers got different keys: %q", ids)
		}
	}
	fi, err := os.Stat(n.Path(manifests.IdentityKeyPath))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("identity key file: %v, mode %v", err, fi.Mode())
	}
	k, err := n.Identity(false)
	if err != nil || k.PublicString() != ids[0] {
		t.Fatalf("Identity(false) after: %v, %v", k, err)
	}
	if left, _ := filepath.Glob(filepath.Join(n.StateDir(), ".identity*")); len(left) > 0 {
		t.Errorf("temporaries left: %v", left)
	}
	// A planted link in its place.
	p := n.Path(manifests.IdentityKeyPath)
	other := filepath.Join(t.TempDir(), "key")
	if err := os.Rename(p, other); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, p); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Identity(false); !errors.Is(err, nodestate.ErrBadState) {
		t.Errorf("an identity key that is a link: %v, want ErrBadState", err)
	}
}
