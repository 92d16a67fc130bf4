package overlay

import (
	"context"
	"fmt"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// LogEntry is one element of a line as strata repo log shows it: its
// image, an overlay, or a later image published for upgrades.
type LogEntry struct {
	// Kind is "image", "overlay" or "upgrade-image".
	Kind    string `json:"kind"`
	Version string `json:"version"`
	Digest  string `json:"digest"`
	Created string `json:"created"`
	// KeyID is the key that signed the manifest ("" for an image
	// without a signature).
	KeyID string `json:"key_id,omitempty"`
	// Files counts the entries an overlay writes (an image's: all it
	// holds); Deletes the paths it removes.
	Files   int `json:"files"`
	Deletes int `json:"deletes"`
	// Services are the restarts and reloads an overlay plans.
	Services []manifests.ServiceAction `json:"services,omitempty"`
	// Requires is an overlay's image constraint.
	Requires string `json:"requires,omitempty"`
	// Rotation is set on an overlay that changes the line's keys.
	Rotation bool `json:"rotation,omitempty"`
	// Head is the overlay a regenerated upgrade image folds through.
	Head *manifests.Ref `json:"head,omitempty"`
	// ValidationSkipped is why the publisher of an overlay did not run
	// its services' validation commands (signed into its manifest).
	ValidationSkipped string `json:"validation_skipped,omitempty"`
	// Reverts is the overlay an overlay undoes (overlay revert).
	Reverts string `json:"reverts,omitempty"`
}

// LineLog is one line of a repository, oldest first.
type LineLog struct {
	Line    string        `json:"line"`
	Head    manifests.Ref `json:"head"`
	Entries []LogEntry    `json:"entries"`
}

// RepoLog is what strata repo log shows.
type RepoLog struct {
	Repo string `json:"repo"`
	// Serial, Expires and KeyID describe the index.
	Serial  uint64    `json:"serial"`
	Expires string    `json:"expires"`
	KeyID   string    `json:"key_id"`
	Lines   []LineLog `json:"lines"`
}

// Log reads the repository at loc (a directory or URL) and lists each of
// its lines (only line, when set): the image, the overlays in order and
// the later images, each manifest verified against its digest in the
// index and its signature against trust (nil: the keys each line's image
// lists) as the line's key rotations change it. Payloads are not read;
// verify-sequence --repo audits those.
func Log(ctx context.Context, loc, line string, trust *sign.KeySet) (*RepoLog, error) {
	st, done, err := repo.LocateForRereads(loc, nil)
	if err != nil {
		return nil, err
	}
	defer done()
	r, err := repo.OpenStore(ctx, st, trust)
	if err != nil {
		return nil, err
	}
	out := &RepoLog{Repo: loc, Serial: r.Index.Serial, Expires: r.Index.Expires, KeyID: r.KeyID, Lines: []LineLog{}}
	if line != "" {
		if _, err := repo.FindLine(r.Index, line); err != nil {
			return nil, fmt.Errorf("repository %s: %w", loc, err)
		}
	}
	for i := range r.Index.Lines {
		l := &r.Index.Lines[i]
		if line != "" && l.Name != line {
			continue
		}
		ll, err := lineLog(ctx, r, l, trust)
		if err != nil {
			return nil, err
		}
		out.Lines = append(out.Lines, *ll)
	}
	return out, nil
}

func lineLog(ctx context.Context, r *repo.Repo, l *manifests.Line, trust *sign.KeySet) (*LineLog, error) {
	im, err := r.Image(ctx, l, trust)
	if err != nil {
		return nil, err
	}
	ll := &LineLog{Line: l.Name, Entries: []LogEntry{imageEntry("image", im)}}
	err = repo.WalkManifests(ctx, r, l, trust, func(a *archive.Archive) {
		m := a.Manifest
		e := LogEntry{
			Kind: "overlay", Version: m.Version, Digest: a.Digest, Created: m.Created, KeyID: a.KeyID,
			Files: len(m.Entries), Deletes: len(m.Deletes), Services: m.Services,
			Requires: m.Requires.Image, Rotation: m.Keys != nil, ValidationSkipped: m.ValidationSkipped,
		}
		if m.Reverts != nil {
			e.Reverts = m.Reverts.Version
		}
		ll.Entries = append(ll.Entries, e)
	})
	if err != nil {
		return nil, err
	}
	ll.Head = l.Head()
	var headKeys *sign.KeySet
	if len(l.Upgrades) > 0 {
		if headKeys, err = repo.HeadKeys(ctx, r, l); err != nil {
			return nil, err
		}
	}
	for _, u := range l.Upgrades {
		// Signed by keys the line trusts at its head (repo add-image).
		uim, err := r.ImageOf(ctx, l, u, headKeys)
		if err != nil {
			return nil, err
		}
		e := imageEntry("upgrade-image", uim)
		e.Head = u.Head
		ll.Entries = append(ll.Entries, e)
	}
	return ll, nil
}

func imageEntry(kind string, im *repo.Image) LogEntry {
	m := im.Manifest
	return LogEntry{Kind: kind, Version: m.Version, Digest: im.Digest, Created: m.Created, KeyID: im.KeyID, Files: len(m.Files)}
}
