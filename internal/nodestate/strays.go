package nodestate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
)

// strayName is how safefile.WriteAtomic names its temporary file: ".NAME."
// and the digits os.CreateTemp adds.
var strayName = regexp.MustCompile(`^\.[^/]+\.[0-9]+$`)

// Strays returns the temporary files that interrupted atomic writes
// (safefile.WriteAtomic: a kill between create and rename) left in the state
// directory and its overlays directory, as absolute paths. Only regular
// files are listed; anything else of that name is not a stray but
// planted state, which the state checks refuse.
func (n Node) Strays() ([]string, error) {
	var out []string
	for _, dir := range []string{n.StateDir(), n.ManifestStore()} {
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Root, err)
		}
		for _, e := range ents {
			if e.Type().IsRegular() && strayName.MatchString(e.Name()) {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	return out, nil
}

// RemoveStrays removes what Strays lists and returns it. The caller holds
// the node's lock (no write of this process is under way then).
func (n Node) RemoveStrays() ([]string, error) {
	strays, err := n.Strays()
	if err != nil {
		return nil, err
	}
	for _, p := range strays {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("removing %s, left by an interrupted write: %w", p, err)
		}
	}
	return strays, nil
}
