package manifests_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

// TestBootImageCmdline: the command line a boot image carries passes the
// check for its own root hash only, exactly as SignImage writes it; one
// naming a partition, another root device, the hash twice, a host, or
// any other parameter is refused.
func TestBootImageCmdline(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	good := manifests.BootImageCmdline(hash)
	if err := manifests.CheckBootImageCmdline(good, hash); err != nil {
		t.Fatalf("%q: %v", good, err)
	}
	for name, c := range map[string]string{
		"another root hash":     manifests.BootImageCmdline(strings.Repeat("cd", 32)),
		"a partition":           strings.Replace(good, "strata.root=auto", "strata.root=PARTUUID=1234", 1),
		"no strata.root":        strings.Replace(good, "strata.root=auto ", "", 1),
		"the plain partition":   strings.Replace(good, "root=/dev/mapper/strata-root", "root=/dev/vda2", 1),
		"the root hash twice":   good + " strata.verity=" + hash,
		"two root devices":      good + " root=/dev/vda2",
		"a host name":           good + " systemd.hostname=edge-1",
		"no root hash":          strings.Replace(good, "strata.verity="+hash, "", 1),
		"an empty command line": "",
		"another init":          good + " init=/bin/sh",
		"activation off":        good + " strata.activate=0",
		"a quoted host name":    good + ` "systemd.hostname=x"`,
		"another order":         strings.Replace(good, "ro rootfstype=squashfs", "rootfstype=squashfs ro", 1),
	} {
		if err := manifests.CheckBootImageCmdline(c, hash); !errors.Is(err, manifests.ErrBootImage) {
			t.Errorf("%s (%q): %v, want ErrBootImage", name, c, err)
		}
	}
}
