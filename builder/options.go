package builder

import (
	"github.com/strata-dev/strata/internal/imagefile"
	"github.com/strata-dev/strata/internal/sign"
)

// Option configures Build and Regenerate.
type Option func(*settings)

type settings struct {
	key      *sign.Key
	trust    *sign.KeySet
	progress func(string)
	fraction func(what string, done, total int64)
	epoch    *int64
	cacheDir string
	strata   string
	format   imagefile.Format
}

func newSettings(opts []Option) *settings {
	s := &settings{progress: func(string) {}, fraction: func(string, int64, int64) {}, format: imagefile.Squashfs}
	for _, o := range opts {
		o(s)
	}
	return s
}

// WithKey signs the manifest with key; the image trusts its public half.
func WithKey(key *sign.Key) Option { return func(s *settings) { s.key = key } }

// WithTrust adds keys to those a regeneration verifies the line's image
// and overlays with (by default only the public half of the WithKey key,
// which must sign the index in any case): after a key rotation brought the
// signing key in, the key the image and the earlier overlays were signed
// with.
func WithTrust(ks *sign.KeySet) Option { return func(s *settings) { s.trust = ks } }

// WithProgress reports each step as a short line of text. Long steps
// (debootstrap, run steps, writing a large image) report many lines.
func WithProgress(f func(step string)) Option {
	return func(s *settings) {
		if f != nil {
			s.progress = f
		}
	}
}

// WithEpoch overrides the recipe's epoch (for SOURCE_DATE_EPOCH).
func WithEpoch(sec int64) Option { return func(s *settings) { s.epoch = &sec } }

// DefaultCacheDir is where debootstrap bases and the results of run steps
// are cached unless WithCacheDir says otherwise (the command line also
// reads --cache and $STRATA_CACHE).
const DefaultCacheDir = "/var/cache/strata"

// WithCacheDir sets the cache directory (default DefaultCacheDir). It
// should lie outside any checkout.
func WithCacheDir(dir string) Option { return func(s *settings) { s.cacheDir = dir } }

// WithStrataBinary sets the strata executable a recipe's strata key bakes
// in, overriding the recipe's strata.binary.
func WithStrataBinary(path string) Option { return func(s *settings) { s.strata = path } }

// WithFormat writes the image Build makes in format f instead of
// squashfs. Tests use imagefile.Tar, which needs no external tool; a
// regeneration writes the format of the image it starts from.
func WithFormat(f imagefile.Format) Option { return func(s *settings) { s.format = f } }

// cache returns the cache directory in effect.
func (s *settings) cache() string {
	if s.cacheDir != "" {
		return s.cacheDir
	}
	return DefaultCacheDir
}

// WithFraction reports how far a long step with a known size has come
// (writing a big image): what it is, bytes done and the total, often. A
// terminal can draw a progress bar from it; WithProgress still gets a line
// every tenth.
func WithFraction(f func(what string, done, total int64)) Option {
	return func(s *settings) {
		if f != nil {
			s.fraction = f
		}
	}
}
