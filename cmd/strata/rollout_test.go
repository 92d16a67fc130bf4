package main

import (
	"testing"

	"github.com/strata-dev/strata/manifests"
)

// A rollout's default target is what the channel's nodes take.
func TestChannelTarget(t *testing.T) {
	refs := func(vs ...string) []manifests.Ref {
		var out []manifests.Ref
		for _, v := range vs {
			out = append(out, manifests.Ref{Version: v})
		}
		return out
	}
	for _, c := range []struct {
		line          []manifests.Ref
		channel, want string
	}{
		{refs("1.0.0", "1.0.1", "2.0.0-rc.1"), "", "1.0.1"},
		{refs("1.0.0", "1.0.1", "2.0.0-rc.1"), "stable", "1.0.1"},
		{refs("1.0.0", "1.0.1", "2.0.0-rc.1"), "candidate", "2.0.0-rc.1"},
		{refs("1.0.0", "2.0.0-rc.1", "2.0.0"), "", "2.0.0"},
		{refs("1.0.0", "2.0.0-rc.1"), "", "1.0.0"},
		{refs("1.0.0"), "", "1.0.0"},
	} {
		if got := channelTarget(c.line, c.channel); got != c.want {
			t.Errorf("%v on %q: %s, want %s", c.line, c.channel, got, c.want)
		}
	}
}
