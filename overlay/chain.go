package overlay

import (
	"context"
	"io"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
)

// Member names of the manifest and its signature inside an archive.
const (
	ManifestMember  = archive.ManifestMember
	SignatureMember = archive.SignatureMember
)

// Archive is an overlay whose manifest has been verified (see package
// internal/archive).
type Archive = archive.Archive

// Opener opens an archive's bytes from the start.
type Opener = archive.Opener

// Chain is a line of a repository, verified (see repo.LoadChain).
type Chain = repo.Chain

// Open reads the manifest and signature of the overlay file at path,
// verifies the signature against trust and validates the manifest. The
// payload is not read; call Payload for that.
func Open(path string, trust *sign.KeySet) (*Archive, error) { return archive.Open(path, trust) }

// ReadArchive verifies a whole overlay from r: manifest, signature and
// every payload member, discarding content.
func ReadArchive(r io.Reader, trust *sign.KeySet) (*Archive, error) {
	return archive.ReadArchive(r, trust)
}

// LoadChain opens line (empty: the repository's only line) of r and
// verifies its image and overlays up to and including version through
// (empty: the head); see repo.LoadChain.
func LoadChain(ctx context.Context, r *repo.Repo, line, through string, trust *sign.KeySet) (*Chain, error) {
	return repo.LoadChain(ctx, r, line, through, trust)
}
