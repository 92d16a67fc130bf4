package builder

import "github.com/strata-dev/strata/internal/sign"

// Option configures Build and Regenerate.
type Option func(*settings)

type settings struct {
	key      *sign.Key
	progress func(string)
	epoch    *int64
}

func newSettings(opts []Option) *settings {
	s := &settings{progress: func(string) {}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// WithKey signs the manifest with key; the image trusts its public half.
func WithKey(key *sign.Key) Option { return func(s *settings) { s.key = key } }

// WithProgress reports each step as a short line of text.
func WithProgress(f func(step string)) Option {
	return func(s *settings) {
		if f != nil {
			s.progress = f
		}
	}
}

// WithEpoch overrides the recipe's epoch (for SOURCE_DATE_EPOCH).
func WithEpoch(sec int64) Option { return func(s *settings) { s.epoch = &sec } }
