package manifests_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

func TestRejection(t *testing.T) {
	a := manifests.Rejection("test: a")
	b := manifests.Rejection("test: a") // same text, another sentinel
	if a.Error() != "test: a" {
		t.Fatalf("Error() = %q", a.Error())
	}
	wrapped := fmt.Errorf("reading %s: %w", "/x", a)
	joined := errors.Join(io.ErrUnexpectedEOF, wrapped)
	for name, err := range map[string]error{"sentinel": a, "wrapped": wrapped, "joined": joined, "wrapped twice": fmt.Errorf("op: %w", joined)} {
		if !errors.Is(err, manifests.ErrRejected) {
			t.Errorf("%s: not of the ErrRejected class: %v", name, err)
		}
		if !errors.Is(err, a) {
			t.Errorf("%s: errors.Is does not find its sentinel: %v", name, err)
		}
		if errors.Is(err, b) {
			t.Errorf("%s: matches another sentinel with the same text", name)
		}
	}
	if !errors.Is(joined, io.ErrUnexpectedEOF) {
		t.Error("joined: lost the other error")
	}
	//lint:ignore SA1032 the order is the point: the class is not one of its sentinels
	if errors.Is(manifests.ErrRejected, a) {
		t.Error("the class matches one of its sentinels")
	}
	for _, err := range []error{io.EOF, errors.New("manifests: rejected"), fmt.Errorf("op: %v", a)} {
		if errors.Is(err, manifests.ErrRejected) {
			t.Errorf("%v is of the ErrRejected class", err)
		}
	}
	for _, s := range []error{manifests.ErrUnsafePath, manifests.ErrInvalid, manifests.ErrVersion, manifests.ErrTooLarge} {
		if !errors.Is(s, manifests.ErrRejected) {
			t.Errorf("%v is not of the ErrRejected class", s)
		}
	}
}
