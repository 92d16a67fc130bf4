package nodestate

import "github.com/strata-dev/strata/manifests"

// maxLoaded bounds the loaded record read from node state.
const maxLoaded = 16 << 20

// Loaded reads what the node's units loaded when strata last restarted or
// reloaded them (an empty record when there is none yet).
func (n Node) Loaded() (*manifests.Loaded, error) {
	l, err := readDoc[manifests.Loaded](n, manifests.LoadedPath, maxLoaded, "the loaded record")
	if err != nil {
		return nil, err
	}
	if l != nil {
		if l.Units == nil {
			l.Units = map[string]manifests.LoadedUnit{}
		}
		return l, nil
	}
	return &manifests.Loaded{Schema: manifests.Schema, Kind: manifests.KindLoaded, Units: map[string]manifests.LoadedUnit{}}, nil
}

// SetLoaded writes the loaded record (atomically).
func (n Node) SetLoaded(l *manifests.Loaded) error { return writeDoc(n, manifests.LoadedPath, l) }
