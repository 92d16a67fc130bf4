package manifests_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

func TestValidCommand(t *testing.T) {
	long := strings.Repeat("a", 4097)
	for _, tc := range []struct {
		argv []string
		ok   bool
	}{
		{[]string{"/usr/sbin/nginx", "-t"}, true},
		{[]string{"/bin/true"}, true},
		{nil, false},
		{[]string{"nginx", "-t"}, false},
		{[]string{"/usr/sbin/../sbin/nginx"}, false},
		{[]string{"/"}, false},
		{[]string{"/bin/echo", "a\x00b"}, false},
		{[]string{"/bin/echo", long}, false},
		{make([]string, 65), false},
	} {
		err := manifests.ValidCommand(tc.argv)
		if (err == nil) != tc.ok {
			t.Errorf("ValidCommand(%.40q) = %v, want ok %v", tc.argv, err, tc.ok)
		}
		if err != nil && !errors.Is(err, manifests.ErrInvalid) {
			t.Errorf("ValidCommand(%.40q) = %v, want ErrInvalid", tc.argv, err)
		}
	}
}

func TestCatalogValidate(t *testing.T) {
	good := manifests.Catalog{Services: []manifests.Service{{Unit: "nginx.service", Validate: []string{"/usr/sbin/nginx", "-t"}}}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]manifests.Catalog{
		"shell in unit": {Services: []manifests.Service{{Unit: "$(reboot).service"}}},
		"option unit":   {Services: []manifests.Service{{Unit: "--host=x.service"}}},
		"twice":         {Services: []manifests.Service{{Unit: "a.service"}, {Unit: "a.service"}}},
		"relative cmd":  {Services: []manifests.Service{{Unit: "a.service", Check: []string{"curl", "x"}}}},
	} {
		if err := c.Validate(); !errors.Is(err, manifests.ErrInvalid) {
			t.Errorf("%s: Validate() = %v, want ErrInvalid", name, err)
		}
	}
}
