package nudge

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// Nudge asks the agents of a line to poll now.
type Nudge struct {
	Line string `json:"line"`
	// Time is when it was made (Unix seconds).
	Time int64 `json:"time"`
	// Signature is a minisign signature of the nudge's message, trusted
	// comment "strata nudge".
	Signature string `json:"signature"`
}

// Window is how long a nudge stays good after it was made, by the
// reader's clock.
const Window = 5 * time.Minute

// MaxAhead is how far ahead of the reader's clock a nudge may be dated:
// one dated further would block every genuine nudge until its time (each
// must be newer than the last taken).
const MaxAhead = 30 * time.Second

// MaxSize bounds a nudge's JSON.
const MaxSize = 16 << 10

const comment = "strata nudge"

// ErrRefused reports a nudge that does not hold.
var ErrRefused = errors.New("nudge refused")

// message is what a nudge's signature covers.
func (n *Nudge) message() []byte {
	return []byte("strata nudge line=" + n.Line + " time=" + strconv.FormatInt(n.Time, 10) + "\n")
}

// Sign makes a nudge for the agents of line, signed with key.
func Sign(key *sign.Key, line string, t time.Time) (*Nudge, error) {
	if err := manifests.ValidLine(line); err != nil {
		return nil, err
	}
	n := &Nudge{Line: line, Time: t.Unix()}
	n.Signature = string(key.Sign(n.message(), comment))
	return n, nil
}

// Parse decodes a nudge (at most MaxSize bytes) strictly, as every other
// document: unknown or repeated fields are refused.
func Parse(b []byte) (*Nudge, error) {
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrRefused, len(b))
	}
	var n Nudge
	if err := manifests.Decode(b, &n); err != nil {
		return nil, fmt.Errorf("%w: not a nudge: %v", ErrRefused, err)
	}
	return &n, nil
}

// Verify checks that n is for line, signed by one of keys and made within
// Window of now.
func (n *Nudge) Verify(keys *sign.KeySet, line string, now time.Time) error {
	if n.Line != line {
		return fmt.Errorf("%w: for line %q, not %q", ErrRefused, n.Line, line)
	}
	if _, err := keys.VerifyFor(n.message(), []byte(n.Signature), comment); err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	if d := now.Sub(n.At()); d > Window {
		return fmt.Errorf("%w: made at %s, more than %s ago by this clock", ErrRefused, n.At().UTC().Format(time.RFC3339), Window)
	}
	if d := n.At().Sub(now); d > MaxAhead {
		return fmt.Errorf("%w: dated %s, more than %s ahead of this clock", ErrRefused, n.At().UTC().Format(time.RFC3339), MaxAhead)
	}
	return nil
}

// At returns the nudge's time.
func (n *Nudge) At() time.Time { return time.Unix(n.Time, 0) }
